-- Move a held lease's end to now + lease (in the lease sets of the task's keys too). A task a
-- claim held back while its lease was lapsed goes back to its in-flight set.
-- KEYS[1] the queue's levels set. ARGV: key base, id, token, lease_us.
-- Returns {'OK', new_expiry_us}, {'STALE'} or {'NOTFOUND'} (not in this queue).
local base, id = ARGV[1], ARGV[2]
local key = task_key(base, id)
local held = check_claim(key, ARGV[3])
if held ~= 'OK' then
  return {held}
end
local expires = fmt(now_us() + tonumber(ARGV[4]))
redis.call('HSET', key, 'lease_expires_at', expires)
local set, p, _, held = find_live(base, key, id)
if set then
  redis.call('ZREM', set, id)
  if held then
    forget_held(base, key, held)
  end
else
  p = level_of(key)
end
add_live(base, 'inflight', p, expires, id)
move_leases(base, key, id, expires)
return {'OK', expires}
