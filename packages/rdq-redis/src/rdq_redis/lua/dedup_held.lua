-- Whether dedup key ARGV[2] is held in one queue (Redis Cluster: the client asks the queue the
-- key's index names before it admits a task of another queue under the key).
-- KEYS[1] the queue's levels set. ARGV: key base, dedup key.
-- Returns {1, holder} when held, else {0}.
local held, holder = dedup_held(ARGV[1], dedup_key(ARGV[1], ARGV[2]), now_us())
if held then
  return {1, holder}
end
return {0}
