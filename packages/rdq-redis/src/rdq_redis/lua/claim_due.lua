-- Claim up to #tokens due tasks of one queue: highest priority first, and within a priority
-- oldest due first.
--
-- Due: in a pending set with next_attempt_at <= now, or in an in-flight set with
-- lease_expires_at <= now (a lost lease, due at its expiry). Each priority has its own pair
-- of sets, so a claim reads O(log n + limit) entries per priority that holds tasks and never
-- looks at tasks that are not due. Reclaiming a lost lease appends a LEASE_EXPIRED attempt
-- naming the lapsed holder and counts it, in this same atomic step.
--
-- KEYS[1] the queue's levels set.
-- ARGV[1] the queue's key base, ARGV[2] lease_us, ARGV[3] worker id ('' or '=' .. id),
--   ARGV[4..] one fresh token per claim slot (made by the client: Lua's PRNG is seeded
--   identically on every run).
-- Returns {{id, token, HGETALL of the task}, ...}.
local now = now_us()
local nows = fmt(now)
local base = ARGV[1]
local expires = fmt(now + tonumber(ARGV[2]))
local worker = ARGV[3]
local limit = #ARGV - 3
local out = {}

local function reclaim(key)
  local f = redis.call('HMGET', key, 'claimed_at', 'claimed_by', 'lease_expires_at')
  local number = fmt(read_count(key, 'attempt_count') + 1)
  local lapsed = as_int(f[3])
  local message = 'lease expired before the attempt was resolved'
  if lapsed then
    message = 'lease expired at ' .. rfc3339(lapsed) .. ' before the attempt was resolved'
  end
  local record = '{"number":' .. number .. ',"outcome":"LEASE_EXPIRED","error_type":"LeaseExpired",'
    .. '"error_message":' .. cjson.encode(message)
  if as_int(f[1]) then
    record = record .. ',"started_at":' .. f[1]
  end
  record = record .. ',"finished_at":' .. nows
  if f[2] then
    record = record .. ',"worker_id":' .. cjson.encode(f[2])
  end
  append_attempt(key, record .. '}', '=LeaseExpired')
  redis.call('HSET', key, 'attempt_count', number)
end

local function claim(id, p, from_pending)
  local key = task_key(base, id)
  if redis.call('EXISTS', key) == 0 then
    -- a dangling index entry; never expected
    redis.call('ZREM', pending_key(base, p), id)
    redis.call('ZREM', inflight_key(base, p), id)
    return
  end
  if from_pending then
    redis.call('ZREM', pending_key(base, p), id)
  else
    reclaim(key)
  end
  local token = ARGV[4 + #out]
  redis.call('HSET', key, 'status', 'IN_FLIGHT', 'lease_expires_at', expires,
    'token', token, 'claimed_at', nows)
  if worker ~= '' then
    redis.call('HSET', key, 'claimed_by', string.sub(worker, 2))
  else
    redis.call('HDEL', key, 'claimed_by')
  end
  redis.call('ZADD', inflight_key(base, p), expires, id)
  out[#out + 1] = {id, token, redis.call('HGETALL', key)}
end

for _, level in ipairs(levels(base)) do
  local p = tonumber(level)
  local want = limit - #out
  local pend = redis.call('ZRANGEBYSCORE', pending_key(base, p), '-inf', nows,
    'WITHSCORES', 'LIMIT', 0, want)
  local lost = redis.call('ZRANGEBYSCORE', inflight_key(base, p), '-inf', nows,
    'WITHSCORES', 'LIMIT', 0, want)
  local i, j = 1, 1
  while #out < limit do
    local from_pending
    if i <= #pend and j <= #lost then
      local a, b = tonumber(pend[i + 1]), tonumber(lost[j + 1])
      from_pending = a < b or (a == b and bytes_less(pend[i], lost[j]))
    elseif i <= #pend then
      from_pending = true
    elseif j <= #lost then
      from_pending = false
    else
      break
    end
    if from_pending then
      claim(pend[i], p, true)
      i = i + 2
    else
      claim(lost[j], p, false)
      j = j + 2
    end
  end
  drop_level_if_empty(base, p)
  if #out >= limit then
    break
  end
end
return out
