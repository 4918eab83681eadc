-- Move a held lease's end to now + lease (in the lease sets of the task's keys too). A task a
-- claim held back while its lease was lapsed goes back to its in-flight set. A lapsed lease
-- holds no concurrency slot: it is extended only when every concurrency limit of its keys
-- has a free slot now (else STALE, nothing changed: another task took the slot).
-- KEYS[1] the queue's levels set. ARGV: key base, id, token, lease_us.
-- Returns {'OK', new_expiry_us}, {'STALE'} or {'NOTFOUND'} (not in this queue).
local base, id = ARGV[1], ARGV[2]
local key = task_key(base, id)
local held = check_claim(key, ARGV[3])
if held ~= 'OK' then
  return {held}
end
local now = now_us()
local ends = as_int(redis.call('HGET', key, 'lease_expires_at'))
if ends ~= nil and ends <= now and redis.call('EXISTS', base .. 'controls') == 1 then
  local keys = task_flow_keys(key)
  table.insert(keys, 1, QUEUE_KEY)
  for _, k in ipairs(keys) do
    local c = load_control(base, k, now)
    if c ~= nil and c.concurrency ~= nil and live_leases(base, k, now) >= c.concurrency then
      return {'STALE'}
    end
  end
end
local expires = fmt(now + tonumber(ARGV[4]))
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
