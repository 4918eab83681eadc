-- Replace a PENDING holder's body (payload and headers) with the one the client built from the
-- body admit.lua returned, only while the holder is still PENDING with that very body (a
-- concurrent replacement or a claim in between: the client reads again). With debounce, the
-- holder also becomes due at next_at (or now + delay), never later than its created_at +
-- max_age, and the key's window (if any) starts again.
-- KEYS[1] the queue's levels set.
-- ARGV: key base, holder id, the body read, the new body, '1' for debounce, next_at_us or '',
--   delay_us, max_age_us or '', dedup key, window_us or '', wake channel.
-- Returns 'replaced', 'skipped' (no longer PENDING) or 'changed' (read again).
local now = now_us()
local base, id = ARGV[1], ARGV[2]
local key = task_key(base, id)
local f = redis.call('HMGET', key, 'status', 'body', 'created_at')
if f[1] ~= 'PENDING' then
  return 'skipped'
end
if f[2] ~= ARGV[3] then
  return 'changed'
end
redis.call('HSET', key, 'body', ARGV[4])
if ARGV[5] == '1' then
  local wanted
  if ARGV[6] ~= '' then
    wanted = tonumber(ARGV[6])
  else
    wanted = now + tonumber(ARGV[7])
  end
  local created = tonumber(f[3]) or now
  local due = math.max(now, math.min(wanted, created + (tonumber(ARGV[8]) or 0)))
  local set = find_live(base, key, id)
  if set then
    redis.call('ZADD', set, fmt(due), id)
  end
  redis.call('HSET', key, 'next_attempt_at', fmt(due))
  if ARGV[10] ~= '' then
    redis.call('HSET', dedup_key(base, ARGV[9]), 'until', fmt(now + tonumber(ARGV[10])))
  end
  redis.call('PUBLISH', ARGV[11], '1')
end
return 'replaced'
