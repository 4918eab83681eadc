-- Claim up to #tokens due tasks of one queue: highest priority first, and within a priority
-- oldest due first.
--
-- Due: in a pending set with next_attempt_at <= now, or in an in-flight set with
-- lease_expires_at <= now (a lost lease, due at its expiry). Each priority has its own pair
-- of sets, so a claim reads O(log n + limit) entries per priority that holds tasks and never
-- looks at tasks that are not due. Reclaiming a lost lease appends a LEASE_EXPIRED attempt
-- naming the lapsed holder and counts it, in this same atomic step.
--
-- Flow control. A queue with no control record and no held-back task (neither its controls
-- nor its heldkeys set exists: one EXISTS) is claimed exactly as above. Otherwise each
-- candidate must pass the control of every one of its keys ('*', 'handler:<ref>', its keys):
--   * the queue's own control ('*') caps the whole claim (paused: nothing; a gate, free
--     concurrency slots, whole rate tokens: at most that many), so it never holds back a task
--     one by one;
--   * a task another key's control holds back is skipped and moved out of the due sets into
--     the held set of (its priority, that key) (held:<p>:<key> for a PENDING task,
--     heldlost:<p>:<key> for a lapsed lease), keeping its score, so later claims do not look
--     at it again: a deep backlog of a paused handler costs its claims nothing;
--   * before walking the due sets the claim lets as many held tasks of each key back as its
--     control now admits (at most the claim's limit, best first by priority and due time);
--     a key without a control any more lets them all back, `limit` per claim;
--   * each claimed task takes one from every gate and rate bucket of its keys (the version is
--     not changed for that) and enters the lease set of every key with a control.
-- A claim holds back (moves) at most PARK_BUDGET tasks, so the first claim after a pause of
-- a deep backlog does not block the server for long: the next claims go on from there.
--
-- Claim order (contract version 4). When the queue's own control sets fair or aging the due
-- tasks are taken in that order instead, by claim_in_order() (_order.lua) with the pieces
-- below; without either the walk below is the order, unchanged.
--
-- KEYS[1] the queue's levels set.
-- ARGV[1] the queue's key base, ARGV[2] lease_us, ARGV[3] worker id ('' or '=' .. id),
--   ARGV[4] how many tasks to claim at most, ARGV[5] this claim's token stem ('<queue>/' and
--   32 random hex digits, made by the client: Lua's PRNG is seeded identically on every run);
--   the n-th task claimed gets the token stem .. '.' .. n, unique since the stem is.
-- Returns {{id, token, HGETALL of the task}, ...}.
local now = now_us()
local nows = fmt(now)
local base = ARGV[1]
local expires = fmt(now + tonumber(ARGV[2]))
local flow = redis.call('EXISTS', base .. 'controls', base .. 'heldkeys') > 0
local worker = ARGV[3]
local limit = tonumber(ARGV[4])
local stem = ARGV[5] .. '.'
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
  local token = stem .. (#out + 1)
  if worker ~= '' then
    redis.call('HSET', key, 'status', 'IN_FLIGHT', 'lease_expires_at', expires,
      'token', token, 'claimed_at', nows, 'claimed_by', string.sub(worker, 2))
  else
    redis.call('HSET', key, 'status', 'IN_FLIGHT', 'lease_expires_at', expires,
      'token', token, 'claimed_at', nows)
    redis.call('HDEL', key, 'claimed_by')
  end
  redis.call('ZADD', inflight_key(base, p), expires, id)
  fair_add(base, redis.call('HGET', key, 'fg'), p, expires, id)
  out[#out + 1] = {id, token, redis.call('HGETALL', key)}
end

-- --- no control and nothing held back: the claim as it always was -------------------------
if not flow then
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
end

-- --- with controls ------------------------------------------------------------------------

local PARK_BUDGET = 1000
local BATCH = 32
local controls = {} -- key -> its control (load_control), or false: it has none

local function control(k)
  local c = controls[k]
  if c == nil then
    c = load_control(base, k, now) or false
    if c then
      c.start = capacity(base, c, now) -- what it let through when the claim began
    end
    controls[k] = c
  end
  return c or nil
end

-- True if a control of `keys` let no task through when the claim began (the task has no
-- rank in a fair or aged order).
local function closed_from_start(keys)
  for _, k in ipairs(keys) do
    local c = control(k)
    if c and c.start < 1 then
      return true
    end
  end
  return false
end

local cap = limit
local queue_control = control(QUEUE_KEY)
if queue_control then
  cap = math.min(cap, capacity(base, queue_control, now))
  if cap <= 0 then
    return out
  end
end

-- Let the best n tasks of the held sets `names` (all of one key) back into their due sets.
local function release(names, n)
  local found = {}
  for _, name in ipairs(names) do
    local kind, p = parse_held(name)
    local got = redis.call('ZRANGE', base .. name, 0, n - 1, 'WITHSCORES')
    for k = 1, #got, 2 do
      found[#found + 1] = {id = got[k], score = got[k + 1], due = tonumber(got[k + 1]), p = p,
        kind = kind, name = name}
    end
  end
  table.sort(found, function(a, b)
    if a.p ~= b.p then
      return a.p > b.p
    end
    if a.due ~= b.due then
      return a.due < b.due
    end
    return bytes_less(a.id, b.id)
  end)
  for k = 1, math.min(n, #found) do
    local e = found[k]
    redis.call('ZREM', base .. e.name, e.id)
    redis.call('HDEL', task_key(base, e.id), 'held')
    add_live(base, e.kind == 'held' and 'pending' or 'inflight', e.p, e.score, e.id)
  end
  for _, name in ipairs(names) do
    if redis.call('EXISTS', base .. name) == 0 then
      redis.call('SREM', base .. 'heldkeys', name)
    end
  end
end

-- The first of `keys` whose control holds a task back now, or nil.
local function holder(keys)
  for _, k in ipairs(keys) do
    local c = control(k)
    if c and capacity(base, c, now) < 1 then
      return k
    end
  end
  return nil
end

-- A task with key k was claimed: take it from the key's gate, slots and bucket.
local function take(c, k, id)
  if c.gate then
    c.gate = c.gate - 1
    c.dirty = true
  end
  if c.concurrency then
    c.in_use = (c.in_use or 0) + 1
  end
  if c.rate then
    c.tokens = c.tokens - 1
    c.dirty = true
  end
  if k ~= QUEUE_KEY then
    redis.call('ZADD', base .. 'lease:' .. k, expires, id)
  end
end

local parked = 0
local function park(id, key, p, from_pending, score, k)
  local name = (from_pending and 'held:' or 'heldlost:') .. p .. ':' .. k
  redis.call('ZREM', from_pending and pending_key(base, p) or inflight_key(base, p), id)
  redis.call('ZADD', base .. name, score, id)
  redis.call('SADD', base .. 'heldkeys', name)
  redis.call('HSET', key, 'held', name)
  parked = parked + 1
end

-- Claim the due task `id` (of priority p, from its pending set or, a lapsed lease, its
-- in-flight set; from the held set `held` when given) unless a control of its keys holds it
-- back: then it is moved to a held set (one it is in already keeps it) and that key returned.
local function visit(id, p, from_pending, score, held)
  local key = task_key(base, id)
  if redis.call('EXISTS', key) == 0 then
    if held then
      redis.call('ZREM', base .. held, id)
      forget_held(base, key, held)
    end
    claim(id, p, from_pending) -- drops the dangling index entry
    return nil
  end
  local keys = task_flow_keys(key)
  local k = holder(keys)
  if k then
    if not held then
      park(id, key, p, from_pending, score, k)
    end
    return k
  end
  if held then
    redis.call('ZREM', base .. held, id)
    forget_held(base, key, held)
  end
  claim(id, p, from_pending)
  if queue_control then
    take(queue_control, QUEUE_KEY, id)
  end
  for _, k2 in ipairs(keys) do
    local c = control(k2)
    if c then
      take(c, k2, id)
    end
  end
  return nil
end

-- Let back as many held tasks of each key as its control admits now (strict order).
local function release_held()
  if redis.call('EXISTS', base .. 'heldkeys') == 1 then
    local by_key, order = {}, {}
    for _, name in ipairs(redis.call('SMEMBERS', base .. 'heldkeys')) do
      local kind, _, k = parse_held(name)
      if kind then
        if by_key[k] == nil then
          by_key[k] = {}
          order[#order + 1] = k
        end
        local names = by_key[k]
        names[#names + 1] = name
      else
        redis.call('SREM', base .. 'heldkeys', name) -- not a held set's name; never expected
      end
    end
    for _, k in ipairs(order) do
      local n = math.min(capacity(base, control(k), now), cap)
      if n > 0 then
        release(by_key[k], n)
      end
    end
  end
end

-- Every entry visited leaves the due range (claimed: leased past now; held back: moved to a
-- held set), so each read starts at the head again.
local function claim_strict()
  for _, level in ipairs(levels(base)) do
    local p = tonumber(level)
    local more = true
    while more and #out < cap and parked < PARK_BUDGET do
      local want = math.max(cap - #out, BATCH)
      local pend = redis.call('ZRANGEBYSCORE', pending_key(base, p), '-inf', nows,
        'WITHSCORES', 'LIMIT', 0, want)
      local lost = redis.call('ZRANGEBYSCORE', inflight_key(base, p), '-inf', nows,
        'WITHSCORES', 'LIMIT', 0, want)
      -- a full read may have more behind it: read again once it is used up
      local pend_full, lost_full = #pend == 2 * want, #lost == 2 * want
      more = pend_full or lost_full
      local i, j = 1, 1
      while #out < cap and parked < PARK_BUDGET do
        local from_pending
        if i <= #pend and j <= #lost then
          local a, b = tonumber(pend[i + 1]), tonumber(lost[j + 1])
          from_pending = a < b or (a == b and bytes_less(pend[i], lost[j]))
        elseif i <= #pend and not lost_full then
          from_pending = true
        elseif j <= #lost and not pend_full then
          from_pending = false
        else
          break
        end
        if from_pending then
          visit(pend[i], p, true, pend[i + 1])
          i = i + 2
        else
          visit(lost[j], p, false, lost[j + 1])
          j = j + 2
        end
      end
    end
    drop_level_if_empty(base, p)
    if #out >= cap or parked >= PARK_BUDGET then
      break
    end
  end
end

if queue_control and (queue_control.fair or queue_control.aging) then
  claim_in_order({base = base, now = now, cap = cap, out = out, control = control,
    capacity_of = function(c) return capacity(base, c, now) end, holder = holder, park = park,
    closed_from_start = closed_from_start,
    visit = visit, parked = function() return parked end, budget = PARK_BUDGET}, queue_control)
else
  release_held()
  claim_strict()
end

for k, c in pairs(controls) do
  if c and c.dirty then
    local fields = {}
    if c.gate then
      fields[#fields + 1] = 'gate'
      fields[#fields + 1] = fmt(c.gate)
    end
    if c.rate then
      fields[#fields + 1] = 'tokens'
      fields[#fields + 1] = string.format('%.17g', c.tokens)
      fields[#fields + 1] = 'refilled'
      fields[#fields + 1] = nows
    end
    redis.call('HSET', control_key(base, k), unpack(fields))
  end
end
return out
