-- The DEAD tasks of one queue grouped by (handler_ref, last error type), from the group sets
-- the scripts keep (one sorted set per group, by dead_lettered_at): O(groups × log n).
-- KEYS[1] the queue's levels set. ARGV[1] the queue's key base.
-- Returns {{label, count, first score, last score}, ...} (label: see group_of).
local base = ARGV[1]
local out = {}
local groups = redis.call('HGETALL', base .. 'groups')
for i = 1, #groups, 2 do
  local set = base .. 'group:' .. groups[i]
  local n = redis.call('ZCARD', set)
  if n > 0 then
    local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
    local last = redis.call('ZRANGE', set, -1, -1, 'WITHSCORES')
    out[#out + 1] = {groups[i + 1], n, first[2], last[2]}
  end
end
return out
