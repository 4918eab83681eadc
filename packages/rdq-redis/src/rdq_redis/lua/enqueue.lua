-- Admit a batch of tasks atomically: check every id first, then write the new ones. Either
-- every task is admitted (or found already there) or nothing changes.
--
-- ARGV[1] = the number of tasks n; ARGV[2] = '1' when this script keeps the id index (a single
--   server), '0' when the client keeps it (Redis Cluster: the index is in other slots; the
--   tasks of one call then all belong to one queue); ARGV[3] = the queue registry's key, or ''
--   when the client keeps it (Cluster).
-- KEYS, per task i: the queue's levels set, the task hash, and (indexed only) the id index
--   key; that is 3 keys per task when indexed, else 2.
-- ARGV from 4 on, 14 values per task: queue, id, key base, body, next_at_us or '', delay_us,
--   attempt_count, redrive_count, attempts_json, handler_ref, last error type ('' or
--   '=' .. type), wake channel, priority, flow-control keys (newline-separated, '' for none).
-- Returns {'OK', {1|0 per task}} (1 = stored, 0 = already in that queue) or
--   {'IDCONFLICT', id, existing_queue}.
local now = now_us()
local n = tonumber(ARGV[1])
local indexed = ARGV[2] == '1'
local registry = ARGV[3]
local stride = indexed and 3 or 2
local width = 14
local seen = {}
local stored = {}
for i = 1, n do
  local a = 3 + (i - 1) * width
  local k = (i - 1) * stride
  local queue, id = ARGV[a + 1], ARGV[a + 2]
  local owner = seen[id]
  if owner == nil then
    if indexed then
      owner = redis.call('GET', KEYS[k + 3])
      if owner == false then
        owner = nil
      end
    elseif redis.call('EXISTS', KEYS[k + 2]) == 1 then
      owner = queue
    end
  end
  if owner ~= nil and owner ~= queue then
    return {'IDCONFLICT', id, owner}
  end
  stored[i] = (owner == nil) and 1 or 0
  seen[id] = queue
end

local woken = {}
for i = 1, n do
  if stored[i] == 1 then
    local a = 3 + (i - 1) * width
    local k = (i - 1) * stride
    local queue, id, base = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
    -- A given next_attempt_at is kept as the client wrote it (exact even past 2^53 µs).
    local due
    if ARGV[a + 5] ~= '' then
      due = ARGV[a + 5]
    else
      due = fmt(now + tonumber(ARGV[a + 6]))
    end
    local key = KEYS[k + 2]
    if indexed then
      redis.call('SET', KEYS[k + 3], queue)
    end
    local priority = tonumber(ARGV[a + 13])
    redis.call('HSET', key,
      'body', ARGV[a + 4],
      'status', 'PENDING',
      'attempt_count', ARGV[a + 7],
      'redrive_count', ARGV[a + 8],
      'attempts', ARGV[a + 9],
      'handler_ref', ARGV[a + 10],
      'priority', ARGV[a + 13],
      'created_at', fmt(now),
      'next_attempt_at', due)
    set_error_type(key, ARGV[a + 11])
    if ARGV[a + 14] ~= '' then
      redis.call('HSET', key, 'keys', ARGV[a + 14])
    end
    admit_group(base, key)
    add_live(base, 'pending', priority, due, id)
    if registry ~= '' then
      redis.call('SADD', registry, queue)
    end
    woken[ARGV[a + 12]] = true
  end
end
for channel in pairs(woken) do
  redis.call('PUBLISH', channel, '1')
end
return {'OK', stored}
