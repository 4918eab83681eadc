-- Every registered worker, read in one step.
-- KEYS: the registry's info hash, started hash and seen set.
-- Returns {HGETALL info, HGETALL started, ZRANGE seen WITHSCORES}.
return {redis.call('HGETALL', KEYS[1]), redis.call('HGETALL', KEYS[2]),
  redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')}
