-- Claim up to #tokens due tasks of one queue, oldest due first.
--
-- Due: in the pending set with next_attempt_at <= now, or in the in-flight set with
-- lease_expires_at <= now (a lost lease). Reclaiming a lost lease appends a LEASE_EXPIRED
-- attempt and counts it, in this same atomic step.
--
-- KEYS[1] pending set, KEYS[2] in-flight set.
-- ARGV[1] the queue's key base, ARGV[2] lease_us, ARGV[3..] one fresh token per claim slot
--   (made by the client: Lua's PRNG is seeded identically on every run).
-- Returns {{id, token, HGETALL of the task}, ...}.
local now = now_us()
local nows = fmt(now)
local base = ARGV[1]
local expires = fmt(now + tonumber(ARGV[2]))
local limit = #ARGV - 2
local pend = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', nows, 'WITHSCORES', 'LIMIT', 0, limit)
local lost = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', nows, 'WITHSCORES', 'LIMIT', 0, limit)
local i, j = 1, 1
local out = {}
while #out < limit do
  local from_pending
  if i <= #pend and j <= #lost then
    from_pending = tonumber(pend[i + 1]) <= tonumber(lost[j + 1])
  elseif i <= #pend then
    from_pending = true
  elseif j <= #lost then
    from_pending = false
  else
    break
  end
  local id
  if from_pending then
    id = pend[i]
    i = i + 2
    redis.call('ZREM', KEYS[1], id)
  else
    id = lost[j]
    j = j + 2
  end
  local key = task_key(base, id)
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', KEYS[2], id) -- a dangling index entry; never expected
  else
    if not from_pending then
      local f = redis.call('HMGET', key, 'attempt_count', 'claimed_at')
      local number = fmt(tonumber(f[1]) + 1)
      local started = ''
      if f[2] then
        started = ',"started_at":' .. f[2]
      end
      append_attempt(key,
        '{"number":' .. number .. ',"outcome":"LEASE_EXPIRED","error_type":"LeaseExpired",'
          .. '"error_message":"the lease expired before the attempt was resolved"'
          .. started .. ',"finished_at":' .. nows .. '}',
        'LeaseExpired')
      redis.call('HSET', key, 'attempt_count', number)
    end
    local token = ARGV[3 + #out]
    redis.call('HSET', key, 'status', 'IN_FLIGHT', 'lease_expires_at', expires,
      'token', token, 'claimed_at', nows)
    redis.call('ZADD', KEYS[2], expires, id)
    out[#out + 1] = {id, token, redis.call('HGETALL', key)}
  end
end
return out
