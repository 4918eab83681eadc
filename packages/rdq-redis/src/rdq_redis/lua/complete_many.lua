-- Complete many claimed tasks in one call, each fenced on its own token exactly as
-- resolve.lua would complete it (the whole call is atomic, too). A task listed twice is
-- completed once; the second entry finds its token no longer current.
--
-- KEYS[1] the levels set of the first item's queue (it routes the call on Cluster, where
--   every item belongs to one queue).
-- ARGV[1] = the number of items n; then 5 values per item: the queue's key base, id, token,
--   attempt_json, attempt error type ('' or '=' .. type).
-- Returns one of 'OK', 'STALE', 'NOTFOUND' (not in that queue) per item, in order.
local nows = fmt(now_us())
local n = tonumber(ARGV[1])
local out = {}
for i = 1, n do
  local a = 1 + (i - 1) * 5
  local base, id = ARGV[a + 1], ARGV[a + 2]
  local key = task_key(base, id)
  local held = check_claim(key, ARGV[a + 3])
  if held == 'OK' then
    finish_claim(base, key, id, ARGV[a + 4], ARGV[a + 5], 'status', 'SUCCEEDED',
      'completed_at', nows)
    redis.call('ZADD', base .. 'succeeded', nows, id)
  end
  out[i] = held
end
return out
