-- Flow-control helpers, put after _lib.lua in front of the scripts that read control records
-- (claim_due, next_due, list_controls, put_control).
--
-- A control record is the hash <base>ctl:<key>: version, updated_at (µs), paused ('1'), gate,
-- concurrency, rate, per (seconds), burst (as given), bucket (the most tokens: burst, or
-- max(1, rate // 10)), state (the engine's JSON, never read here), and the rate bucket as of
-- the last claim that took from it: tokens, refilled (µs). No tokens: the bucket is full (a
-- new or changed rate starts full). The queue's own record ('*') may also hold fair (a key
-- prefix) and aging (seconds per step of priority): the claim order (see _order.lua).

local QUEUE_KEY = '*'

local function control_key(base, k)
  return base .. 'ctl:' .. k
end

-- How many tasks with key k hold a live lease (lease_expires_at after now): the queue's own
-- key counts its in-flight sets, any other key its lease set.
local function live_leases(base, k, now)
  local after = '(' .. fmt(now)
  if k == QUEUE_KEY then
    local n = 0
    for _, p in ipairs(levels(base)) do
      n = n + redis.call('ZCOUNT', inflight_key(base, p), after, '+inf')
    end
    return n
  end
  return redis.call('ZCOUNT', base .. 'lease:' .. k, after, '+inf')
end

-- The control of key k as a claim uses it, its rate bucket refilled to now, or nil when there
-- is none. `in_use` is filled in by capacity() when first needed.
local function load_control(base, k, now)
  local names = {'version', 'paused', 'gate', 'concurrency', 'rate', 'per', 'bucket', 'tokens',
    'refilled'}
  if k == QUEUE_KEY then
    names[10], names[11] = 'fair', 'aging'
  end
  local f = redis.call('HMGET', control_key(base, k), unpack(names))
  if not f[1] then
    return nil
  end
  local c = {key = k, paused = f[2] == '1', gate = as_int(f[3]), concurrency = as_int(f[4])}
  if k == QUEUE_KEY then
    c.fair = f[10] or nil
    local aging = tonumber(f[11])
    if aging and aging > 0 then
      c.aging = aging
    end
  end
  local rate, per, bucket = tonumber(f[5]), tonumber(f[6]), tonumber(f[7])
  if rate and per and per > 0 then
    bucket = bucket or 1
    local tokens, at = tonumber(f[8]), as_int(f[9])
    if tokens == nil or at == nil then
      tokens = bucket
    else
      tokens = math.min(bucket, tokens + math.max(0, now - at) * rate / (per * 1000000))
    end
    c.rate, c.per, c.tokens = rate, per, tokens
  end
  return c
end

-- How many more tasks with the control's key it lets through now (math.huge: any number).
local function capacity(base, c, now)
  if c == nil then
    return math.huge
  end
  if c.paused then
    return 0
  end
  local n = math.huge
  if c.gate then
    n = math.min(n, c.gate)
  end
  if c.concurrency then
    if c.in_use == nil then
      c.in_use = live_leases(base, c.key, now)
    end
    n = math.min(n, c.concurrency - c.in_use)
  end
  if c.rate then
    n = math.min(n, math.floor(c.tokens))
  end
  return math.max(n, 0)
end

-- When the control will let a task through again by the clock alone (µs), or nil when only a
-- change of the control (or a lease ending, which wakes the queue) can: now if it does already.
local function free_at(base, c, now)
  if c == nil then
    return now
  end
  if c.paused or (c.gate and c.gate < 1) then
    return nil
  end
  local at = now
  if c.concurrency then
    if c.concurrency < 1 then
      return nil
    end
    if live_leases(base, c.key, now) >= c.concurrency then
      -- the earliest live lease to lapse frees a slot
      local first = nil
      local after = '(' .. fmt(now)
      local sets = {}
      if c.key == QUEUE_KEY then
        for _, p in ipairs(levels(base)) do
          sets[#sets + 1] = inflight_key(base, p)
        end
      else
        sets[1] = base .. 'lease:' .. c.key
      end
      for _, set in ipairs(sets) do
        local got = redis.call('ZRANGEBYSCORE', set, after, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
        if #got > 0 and (first == nil or tonumber(got[2]) < first) then
          first = tonumber(got[2])
        end
      end
      if first == nil then
        return nil
      end
      at = math.max(at, first)
    end
  end
  if c.rate and c.tokens < 1 then
    at = math.max(at, now + math.ceil((1 - c.tokens) * c.per * 1000000 / c.rate))
  end
  return at
end
