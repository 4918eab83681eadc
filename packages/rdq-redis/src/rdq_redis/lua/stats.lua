-- A consistent snapshot of one queue's counts by the server clock. Tasks a claim held back
-- (the held sets) count as what they are: PENDING, or IN_FLIGHT with a lapsed lease.
-- KEYS[1] the queue's levels set. ARGV[1] the queue's key base.
-- Returns {now_us, pending, in_flight, dead, succeeded, cancelled,
--   oldest due pending score or ''}.
local now = now_us()
local base = ARGV[1]
local pending, in_flight = 0, 0
local oldest = nil
local function oldest_of(set)
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if #first > 0 and tonumber(first[2]) <= now and (oldest == nil or tonumber(first[2]) < tonumber(oldest)) then
    oldest = first[2]
  end
end
for _, p in ipairs(levels(base)) do
  pending = pending + redis.call('ZCARD', pending_key(base, p))
  in_flight = in_flight + redis.call('ZCARD', inflight_key(base, p))
  oldest_of(pending_key(base, p))
end
for _, name in ipairs(held_names(base, 'held')) do
  pending = pending + redis.call('ZCARD', base .. name)
  oldest_of(base .. name)
end
for _, name in ipairs(held_names(base, 'heldlost')) do
  in_flight = in_flight + redis.call('ZCARD', base .. name)
end
return {fmt(now), pending, in_flight, redis.call('ZCARD', base .. 'dead'),
  redis.call('ZCARD', base .. 'succeeded'), redis.call('ZCARD', base .. 'cancelled'),
  oldest or ''}
