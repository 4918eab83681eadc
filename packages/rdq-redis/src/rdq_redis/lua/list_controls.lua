-- The control records of one queue, each with how many tasks with its key hold a live lease.
-- KEYS[1] the queue's levels set. ARGV[1] the queue's key base.
-- Returns {{key, HGETALL of its record, live leases}, ...} (in no particular order).
local now = now_us()
local base = ARGV[1]
local out = {}
for _, k in ipairs(redis.call('SMEMBERS', base .. 'controls')) do
  local fields = redis.call('HGETALL', control_key(base, k))
  if #fields > 0 then
    out[#out + 1] = {k, fields, live_leases(base, k, now)}
  end
end
return out
