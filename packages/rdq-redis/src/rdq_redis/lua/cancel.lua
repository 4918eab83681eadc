-- Cancel the listed PENDING or IN_FLIGHT tasks of one queue: each becomes CANCELLED at now,
-- its lease, token and claim fields cleared (so its holder's token is stale from now on).
-- Other ids are ignored.
-- KEYS[1] the queue's levels set. ARGV: key base, id...
-- Returns how many tasks were cancelled.
local base = ARGV[1]
local nows = fmt(now_us())
local n = 0
local finished = {SUCCEEDED = true, DEAD = true, CANCELLED = true}
for i = 2, #ARGV do
  local id = ARGV[i]
  local key = task_key(base, id)
  local status = redis.call('HGET', key, 'status')
  -- The sets say what is live; the status field is only a shortcut for finished tasks.
  if not finished[status or ''] and remove_live(base, key, id) then
    redis.call('HSET', key, 'status', 'CANCELLED', 'cancelled_at', nows)
    drop_leases(base, key, id)
    redis.call('HDEL', key, 'token', 'lease_expires_at', 'claimed_at', 'claimed_by')
    redis.call('ZADD', base .. 'cancelled', nows, id)
    n = n + 1
  end
end
return n
