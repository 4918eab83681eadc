-- Helpers shared by every rdq script; rdq_redis prepends this file to each script it loads.
--
-- Times are integer microseconds since the Unix epoch, read from the server's TIME (the
-- storage clock). They stay exact in Lua's doubles (< 2^53) as long as they are turned into
-- strings with fmt(): tostring() would round them to 14 significant digits.
--
-- A script never stops half-way on a corrupt task (a hash edited by hand or written by a
-- buggy producer): Redis does not roll back the writes a failed script made before the error,
-- so nothing here calls a command that fails on a bad stored value (HINCRBY on text, say) or
-- does arithmetic on a value it did not check. A stored value a script must replace and
-- cannot read is kept in the task's 'raw.<field>' (the first one only) for inspection.

local MIN_PRIORITY, MAX_PRIORITY = -10, 10

local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

local function fmt(n)
  return string.format('%.0f', n)
end

local function task_key(base, id)
  return base .. 'task:' .. id
end

local function index_key(prefix, id)
  return prefix .. ':id:{' .. id .. '}'
end

-- The dedup record of key `k` in a queue (its holder and until when) and the key's index
-- entry (key -> queue: keys are unique across queues, as ids are).
local function dedup_key(base, k)
  return base .. 'dedup:' .. k
end

local function dedup_index_key(prefix, k)
  return prefix .. ':dedup:{' .. k .. '}'
end

-- Whether a dedup record holds its key at `now`: its task exists and, with an `until`, that
-- has not passed, or without one the task is PENDING or IN_FLIGHT. Returns held, holder id,
-- the holder's status and created_at.
local function dedup_held(base, record, now)
  local f = redis.call('HMGET', record, 'task', 'until')
  local holder, until_us = f[1], f[2]
  if not holder then
    return false
  end
  local t = redis.call('HMGET', base .. 'task:' .. holder, 'status', 'created_at')
  local status = t[1]
  if not status then
    return false
  end
  local held
  if until_us and until_us ~= '' then
    held = (tonumber(until_us) or 0) > now
  else
    held = status == 'PENDING' or status == 'IN_FLIGHT'
  end
  return held, holder, status, t[2]
end

-- A task about to be deleted takes its dedup record with it (when the record is still its).
local function drop_dedup(base, key, id)
  local k = redis.call('HGET', key, 'dedup')
  if k then
    local record = dedup_key(base, k)
    if redis.call('HGET', record, 'task') == id then
      redis.call('DEL', record)
    end
  end
end

local function pending_key(base, p)
  return base .. 'pending:' .. p
end

local function inflight_key(base, p)
  return base .. 'inflight:' .. p
end

-- A stored integer, or nil when the stored value is not one.
local function as_int(raw)
  if type(raw) ~= 'string' or not string.match(raw, '^%-?%d+$') then
    return nil
  end
  return tonumber(raw)
end

local function keep_raw(key, field, value)
  redis.call('HSETNX', key, 'raw.' .. field, value)
end

-- The priority a task with stored priority `raw` is indexed under: that priority, or 0 when
-- it is missing or out of range (a corrupt task is still claimed, at the default priority).
local function level_from(raw)
  local p = as_int(raw)
  if p == nil or p < MIN_PRIORITY or p > MAX_PRIORITY then
    return 0
  end
  return p
end

-- The priority a task is indexed under (see level_from).
local function level_of(key)
  return level_from(redis.call('HGET', key, 'priority'))
end

-- The priorities that may hold PENDING or IN_FLIGHT tasks, highest first.
local function levels(base)
  return redis.call('ZREVRANGE', base .. 'levels', 0, -1)
end

-- Fair shares (contract version 4): a queue whose own control sets `fair` (a key prefix)
-- keeps, beside its pending and in-flight sets, one sorted set per group and priority,
-- 'fair:<p>:<group>', of the group's live tasks (pending, in flight or held, scored as in
-- the set that holds them), and their names in the set 'fairsets'. A task's group is its
-- hash field 'fg', written at admission (admit_group) and by regroup() when the prefix
-- changes; add_live, remove_live, finish_claim and the claim keep the group sets. A claim
-- reads them (_order.lua), never the whole queue.

-- The group of a task with flow keys `keys` (keys[1] its handler's) under prefix `prefix`:
-- its first key that starts with it, or ''.
local function group_in(keys, prefix)
  for i = 2, #keys do
    if string.sub(keys[i], 1, #prefix) == prefix then
      return keys[i]
    end
  end
  return ''
end

local function fair_set(p, g)
  return 'fair:' .. p .. ':' .. g
end

-- Keep live task `id` (hash `key`, of group fg or none) at `score` in its group's set.
local function fair_add(base, fg, p, score, id)
  if fg then
    local name = fair_set(p, fg)
    redis.call('ZADD', base .. name, score, id)
    redis.call('SADD', base .. 'fairsets', name)
  end
end

local function fair_remove(base, fg, p, id)
  if fg then
    redis.call('ZREM', base .. fair_set(p, fg), id)
  end
end

-- Index `id` as PENDING ('pending') or IN_FLIGHT ('inflight') at priority p, by `score`.
local function add_live(base, kind, p, score, id)
  redis.call('ZADD', base .. kind .. ':' .. p, score, id)
  redis.call('ZADD', base .. 'levels', p, p)
  fair_add(base, redis.call('HGET', task_key(base, id), 'fg'), p, score, id)
end

-- A held set's name ('held:<p>:<key>' or 'heldlost:<p>:<key>', the key after base) as its
-- kind ('held': PENDING, 'heldlost': IN_FLIGHT with a lapsed lease), priority and control key;
-- nil for anything else.
local function parse_held(name)
  local kind, p, k = string.match(name, '^(%a+):(%-?%d+):(.+)$')
  if (kind == 'held' or kind == 'heldlost') and k then
    return kind, tonumber(p), k
  end
  return nil
end

-- The names of the held sets of one kind that may hold ids.
local function held_names(base, kind)
  local names = {}
  if redis.call('EXISTS', base .. 'heldkeys') == 1 then
    for _, name in ipairs(redis.call('SMEMBERS', base .. 'heldkeys')) do
      if parse_held(name) == kind then
        names[#names + 1] = name
      end
    end
  end
  return names
end

-- A task left the held set `name`: clear its mark, and forget the set once it is empty.
local function forget_held(base, key, name)
  redis.call('HDEL', key, 'held')
  if redis.call('EXISTS', base .. name) == 0 then
    redis.call('SREM', base .. 'heldkeys', name)
  end
end

-- The set that holds live task `id` and what it says: (set, priority, 'pending' or
-- 'inflight', the held set's name when a claim held the task back), or nil. A held task's
-- mark is looked at first, then its own priority's sets, then every priority's (the priority
-- field may have been edited by hand).
local function find_live(base, key, id)
  local held = redis.call('HGET', key, 'held')
  if held and redis.call('ZSCORE', base .. held, id) then
    local kind, hp = parse_held(held)
    if kind then
      return base .. held, hp, kind == 'held' and 'pending' or 'inflight', held
    end
  end
  local p = level_of(key)
  if redis.call('ZSCORE', pending_key(base, p), id) then
    return pending_key(base, p), p, 'pending'
  end
  if redis.call('ZSCORE', inflight_key(base, p), id) then
    return inflight_key(base, p), p, 'inflight'
  end
  for _, q in ipairs(levels(base)) do
    if redis.call('ZSCORE', pending_key(base, q), id) then
      return pending_key(base, q), tonumber(q), 'pending'
    end
    if redis.call('ZSCORE', inflight_key(base, q), id) then
      return inflight_key(base, q), tonumber(q), 'inflight'
    end
  end
  return nil
end

-- Drop `id` from the pending, in-flight or held set that holds it; true if one did.
local function remove_live(base, key, id)
  local set, p, _, held = find_live(base, key, id)
  if set then
    redis.call('ZREM', set, id)
    fair_remove(base, redis.call('HGET', key, 'fg'), p, id)
    if held then
      forget_held(base, key, held)
    end
    return true
  end
  return false
end

-- The flow-control keys of a task but the queue's own '*': 'handler:' .. its handler_ref,
-- then its keys (stored newline-separated: a key holds no whitespace).
local function task_flow_keys(key)
  local f = redis.call('HMGET', key, 'handler_ref', 'keys')
  local out = {'handler:' .. (f[1] or '')}
  if f[2] then
    for k in string.gmatch(f[2], '[^\n]+') do
      out[#out + 1] = k
    end
  end
  return out
end

-- A task's lease ended (resolved, cancelled): take it out of the lease sets of its keys
-- (kept only while the queue has controls). When that frees a slot a held-back task may be
-- waiting for, wake the queue's waiters.
local function drop_leases(base, key, id)
  if redis.call('EXISTS', base .. 'controls') == 0 then
    return
  end
  local freed = 0
  for _, k in ipairs(task_flow_keys(key)) do
    freed = freed + redis.call('ZREM', base .. 'lease:' .. k, id)
  end
  -- (The queue's own concurrency limit counts every lease: no set of its own to look at.)
  if (freed > 0 and redis.call('EXISTS', base .. 'heldkeys') == 1)
      or redis.call('HEXISTS', base .. 'ctl:*', 'concurrency') == 1 then
    redis.call('PUBLISH', base .. 'wake', '1')
  end
end

-- A task's lease moved to `expires` (extended): move it in the lease sets that hold it.
local function move_leases(base, key, id, expires)
  if redis.call('EXISTS', base .. 'controls') == 0 then
    return
  end
  for _, k in ipairs(task_flow_keys(key)) do
    redis.call('ZADD', base .. 'lease:' .. k, 'XX', expires, id)
  end
end

-- A task was stored IN_FLIGHT with a lease until `expires` (imported): add it to the lease
-- set of each of its keys that has a control record.
local function add_leases(base, key, id, expires)
  if redis.call('EXISTS', base .. 'controls') == 0 then
    return
  end
  for _, k in ipairs(task_flow_keys(key)) do
    if redis.call('EXISTS', base .. 'ctl:' .. k) == 1 then
      redis.call('ZADD', base .. 'lease:' .. k, expires, id)
    end
  end
end

-- Forget priorities whose sets are both empty (called by claims, which visit them anyway).
local function drop_level_if_empty(base, p)
  if redis.call('EXISTS', pending_key(base, p), inflight_key(base, p)) == 0 then
    redis.call('ZREM', base .. 'levels', p)
  end
end

-- A count field as a non-negative integer; a value that is not one counts as 0 (and is kept).
local function read_count(key, field)
  local raw = redis.call('HGET', key, field)
  local n = as_int(raw)
  if n == nil or n < 0 then
    if raw then
      keep_raw(key, field, raw)
    end
    return 0
  end
  return n
end

-- HINCRBY, without failing on a stored value that is not an integer.
local function bump_count(key, field)
  local n = read_count(key, field) + 1
  redis.call('HSET', key, field, fmt(n))
  return n
end

-- The last attempt's error type: '' for none, else '=' .. value.
local function set_error_type(key, error_type)
  if error_type ~= '' then
    redis.call('HSET', key, 'error_type', string.sub(error_type, 2))
  else
    redis.call('HDEL', key, 'error_type')
  end
end

-- The stored JSON array of attempts `list` with one JSON attempt record appended, without
-- parsing either (so payload numbers never pass through cjson). A stored value that is not an
-- array is kept in 'raw.attempts' and a new array begun.
local function with_attempt(key, list, attempt_json)
  if list and string.sub(list, 1, 1) == '[' and string.sub(list, -1) == ']' then
    if string.match(list, '^%[%s*%]$') then
      return '[' .. attempt_json .. ']'
    end
    return string.sub(list, 1, -2) .. ',' .. attempt_json .. ']'
  end
  if list then
    keep_raw(key, 'attempts', list)
  end
  return '[' .. attempt_json .. ']'
end

-- Append one JSON attempt record to the task's attempts (see with_attempt) and set the last
-- error type.
local function append_attempt(key, attempt_json, error_type)
  local list = with_attempt(key, redis.call('HGET', key, 'attempts'), attempt_json)
  redis.call('HSET', key, 'attempts', list)
  set_error_type(key, error_type)
end

-- Fencing: 'OK' if `token` holds the task's lease, 'STALE' if it does not, 'NOTFOUND' if the
-- task is not in this queue.
local function check_claim(key, token)
  local f = redis.call('HMGET', key, 'status', 'token')
  if f[1] == 'IN_FLIGHT' and f[2] == token then
    return 'OK'
  end
  if not f[1] and redis.call('EXISTS', key) == 0 then
    return 'NOTFOUND'
  end
  return 'STALE'
end

-- The DLQ group of a task (handler_ref and last error type) as one label and its digest.
-- The label is '<length of handler_ref>:<handler_ref>' followed by '=' .. error type when the
-- last attempt had one.
local function group_of(key)
  local f = redis.call('HMGET', key, 'handler_ref', 'error_type')
  local handler = f[1] or ''
  local label = #handler .. ':' .. handler
  if f[2] then
    label = label .. '=' .. f[2]
  end
  return redis.sha1hex(label), label
end

local function group_add(base, key, id, score)
  local gid, label = group_of(key)
  redis.call('HSET', base .. 'groups', gid, label)
  redis.call('ZADD', base .. 'group:' .. gid, score, id)
  redis.call('HSET', key, 'dlq_group', gid)
end

local function group_remove(base, key, id)
  local gid = redis.call('HGET', key, 'dlq_group')
  if not gid then
    return
  end
  local group = base .. 'group:' .. gid
  redis.call('ZREM', group, id)
  if redis.call('EXISTS', group) == 0 then
    redis.call('HDEL', base .. 'groups', gid)
  end
  redis.call('HDEL', key, 'dlq_group')
end

-- A claim ended (resolved, or its task discarded): the task leaves the in-flight (or held)
-- set that holds it and the lease sets of its keys. held, priority, fg: the task's fields.
local function release_claim(base, key, id, held, priority, fg)
  if held or redis.call('ZREM', inflight_key(base, level_from(priority)), id) == 0 then
    remove_live(base, key, id)
  else
    fair_remove(base, fg, level_from(priority), id)
  end
  drop_leases(base, key, id)
end

-- What every resolution of a held claim does: append the attempt, count it, drop the lease
-- and the claim, and set the hash fields of the new state given as further arguments
-- (field, value, ...). The caller then indexes the task again. A resolution is the commonest
-- write there is, so this reads the hash once and writes it twice, and takes a task that is
-- not held back out of its priority's in-flight set directly (else remove_live finds it).
local function finish_claim(base, key, id, attempt_json, error_type, ...)
  local f = redis.call('HMGET', key, 'attempts', 'attempt_count', 'held', 'priority', 'fg')
  local count = as_int(f[2])
  if count == nil or count < 0 then
    if f[2] then
      keep_raw(key, 'attempt_count', f[2])
    end
    count = 0
  end
  local fields = {'attempts', with_attempt(key, f[1], attempt_json),
    'attempt_count', fmt(count + 1), ...}
  local gone = {'token', 'lease_expires_at', 'claimed_at', 'claimed_by'}
  if error_type ~= '' then
    fields[#fields + 1] = 'error_type'
    fields[#fields + 1] = string.sub(error_type, 2)
  else
    gone[#gone + 1] = 'error_type'
  end
  redis.call('HSET', key, unpack(fields))
  redis.call('HDEL', key, unpack(gone))
  release_claim(base, key, id, f[3], f[4], f[5])
end

-- Byte-wise a < b, the order Redis gives members of equal score. (Lua's own string '<' goes
-- through strcoll and so depends on the server's locale.)
local function bytes_less(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a < #b
end

-- A filter value is '' when the filter does not constrain that field, else '=' .. value.
local function task_matches(key, handler_filter, error_filter)
  if handler_filter == '' and error_filter == '' then
    return true
  end
  local f = redis.call('HMGET', key, 'handler_ref', 'error_type')
  if handler_filter ~= '' and f[1] ~= string.sub(handler_filter, 2) then
    return false
  end
  if error_filter ~= '' and f[2] ~= string.sub(error_filter, 2) then
    return false
  end
  return true
end

-- The ids a redrive or purge selects from the DLQ set: an explicit id list (ARGV from
-- `first` on: 'ids', id...) or a filter ('filter', min_score, max_score, handler, error).
-- Ids are only candidates: callers still check each one's status.
local function select_ids(dead_key, base, first)
  local mode = ARGV[first]
  local ids = {}
  if mode == 'ids' then
    for i = first + 1, #ARGV do
      ids[#ids + 1] = ARGV[i]
    end
    return ids
  end
  local handler_filter, error_filter = ARGV[first + 3], ARGV[first + 4]
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', dead_key, ARGV[first + 1], ARGV[first + 2])) do
    if task_matches(task_key(base, id), handler_filter, error_filter) then
      ids[#ids + 1] = id
    end
  end
  return ids
end

-- True when the queue holds no task in any status.
local function queue_empty(base)
  for _, p in ipairs(levels(base)) do
    if redis.call('EXISTS', pending_key(base, p), inflight_key(base, p)) > 0 then
      return false
    end
  end
  return redis.call('EXISTS', base .. 'dead', base .. 'succeeded', base .. 'cancelled',
    base .. 'heldkeys') == 0
end

-- RFC 3339 text of a time in µs (days to civil date: H. Hinnant's algorithm).
local function rfc3339(us)
  local secs = math.floor(us / 1000000)
  local micros = us - secs * 1000000
  local days = math.floor(secs / 86400)
  local rem = secs - days * 86400
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then
    y = y + 1
  end
  return string.format('%04d-%02d-%02dT%02d:%02d:%02d.%06dZ', y, m, d,
    math.floor(rem / 3600), math.floor(rem % 3600 / 60), rem % 60, micros)
end


-- A task is stored (hash `key` written, not yet indexed): its group, when its queue is fair.
-- One HGET of the queue's own control for a queue that is not.
local function admit_group(base, key)
  local prefix = redis.call('HGET', base .. 'ctl:*', 'fair')
  if prefix then
    redis.call('HSET', key, 'fg', group_in(task_flow_keys(key), prefix))
  else
    redis.call('HDEL', key, 'fg')
  end
end

-- The queue's fair prefix was set, changed or removed (nil): its group sets built again from
-- its pending, in-flight and held sets. One pass over the queue's live tasks, at that change
-- only.
local function regroup(base, prefix)
  if prefix then
    redis.call('SET', base .. 'fairidx', prefix)
  else
    redis.call('DEL', base .. 'fairidx')
  end
  if redis.call('EXISTS', base .. 'fairsets') == 1 then
    for _, name in ipairs(redis.call('SMEMBERS', base .. 'fairsets')) do
      redis.call('DEL', base .. name)
    end
    redis.call('DEL', base .. 'fairsets')
  end
  local sets = {}
  for _, level in ipairs(levels(base)) do
    local p = tonumber(level)
    sets[#sets + 1] = {pending_key(base, p), p}
    sets[#sets + 1] = {inflight_key(base, p), p}
  end
  for _, kind in ipairs({'held', 'heldlost'}) do
    for _, name in ipairs(held_names(base, kind)) do
      local _, p = parse_held(name)
      sets[#sets + 1] = {base .. name, p}
    end
  end
  for _, set in ipairs(sets) do
    local entries = redis.call('ZRANGE', set[1], 0, -1, 'WITHSCORES')
    for i = 1, #entries, 2 do
      local key = task_key(base, entries[i])
      if prefix then
        local g = group_in(task_flow_keys(key), prefix)
        redis.call('HSET', key, 'fg', g)
        fair_add(base, g, set[2], entries[i + 1], entries[i])
      else
        redis.call('HDEL', key, 'fg')
      end
    end
  end
end
