-- When the next task of one queue becomes due, by the server clock.
-- KEYS[1] the queue's levels set. ARGV[1] the queue's key base.
-- Returns {now_us, earliest due score or ''}.
local now = now_us()
local base = ARGV[1]
local best = ''
for _, p in ipairs(levels(base)) do
  for _, set in ipairs({pending_key(base, p), inflight_key(base, p)}) do
    local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
    if #first > 0 and (best == '' or tonumber(first[2]) < tonumber(best)) then
      best = first[2]
    end
  end
end
return {fmt(now), best}
