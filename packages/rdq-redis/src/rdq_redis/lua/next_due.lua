-- When the next task of one queue becomes due, by the server clock.
-- KEYS[1] pending set, KEYS[2] in-flight set.
-- Returns {now_us, earliest due score or ''}.
local now = now_us()
local best = ''
for _, set in ipairs(KEYS) do
  local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
  if #first > 0 and (best == '' or tonumber(first[2]) < tonumber(best)) then
    best = first[2]
  end
end
return {fmt(now), best}
