-- Forget the workers last seen before a cut-off.
-- KEYS: the registry's info hash, started hash and seen set. ARGV: cut-off (µs, exclusive).
-- Returns how many were forgotten.
local ids = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[1])
for _, id in ipairs(ids) do
  redis.call('HDEL', KEYS[1], id)
  redis.call('HDEL', KEYS[2], id)
  redis.call('ZREM', KEYS[3], id)
end
return #ids
