-- Forget one worker.
-- KEYS: the registry's info hash, started hash and seen set. ARGV: worker id.
-- Returns 1 if it was registered, else 0.
local id = ARGV[1]
local n = redis.call('HDEL', KEYS[1], id)
redis.call('HDEL', KEYS[2], id)
n = n + redis.call('ZREM', KEYS[3], id)
return n > 0 and 1 or 0
