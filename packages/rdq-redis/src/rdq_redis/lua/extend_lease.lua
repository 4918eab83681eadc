-- Move a held lease's end to now + lease.
-- KEYS[1] in-flight set. ARGV: key base, id, token, lease_us.
-- Returns {'OK', new_expiry_us}, {'STALE'} or {'NOTFOUND'} (not in this queue).
local key = task_key(ARGV[1], ARGV[2])
local held = check_claim(key, ARGV[3])
if held ~= 'OK' then
  return {held}
end
local expires = fmt(now_us() + tonumber(ARGV[4]))
redis.call('HSET', key, 'lease_expires_at', expires)
redis.call('ZADD', KEYS[1], expires, ARGV[2])
return {'OK', expires}
