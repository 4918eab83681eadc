-- Store tasks exactly as given (status, counters, attempts, every time), for moving tasks
-- between stores. Every id is checked first: an id already in the same queue is left
-- unchanged, an id in another queue stops the whole call before anything is written.
--
-- ARGV[1] = the number of tasks n; ARGV[2] = '1' when this script keeps the id index (a single
--   server), '0' on Redis Cluster (the tasks of one call then all belong to one queue);
--   ARGV[3] = the queue registry's key, or '' (Cluster).
-- KEYS, per task i: the queue's levels set, the task hash, and (indexed only) the id index key.
-- ARGV from 4 on, per task: queue, id, key base, status set ('pending' | 'inflight' | 'dead'
--   | 'succeeded' | 'cancelled'), priority, status time in µs or '' (then now, written to the
--   field named next), the status time's field, wake channel, the number of hash fields m,
--   then m field/value pairs.
-- Returns {'OK', {1|0 per task}} or {'IDCONFLICT', id, existing_queue}.
local nows = fmt(now_us())
local n = tonumber(ARGV[1])
local indexed = ARGV[2] == '1'
local registry = ARGV[3]
local stride = indexed and 3 or 2

local starts = {}
local a = 4
for i = 1, n do
  starts[i] = a
  a = a + 9 + 2 * tonumber(ARGV[a + 8])
end

local seen = {}
local stored = {}
for i = 1, n do
  local s, k = starts[i], (i - 1) * stride
  local queue, id = ARGV[s], ARGV[s + 1]
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

for i = 1, n do
  if stored[i] == 1 then
    local s, k = starts[i], (i - 1) * stride
    local queue, id, base, kind = ARGV[s], ARGV[s + 1], ARGV[s + 2], ARGV[s + 3]
    local p, score = tonumber(ARGV[s + 4]), ARGV[s + 5]
    local key = KEYS[k + 2]
    if indexed then
      redis.call('SET', KEYS[k + 3], queue)
    end
    local m = tonumber(ARGV[s + 8])
    local fields = {}
    for j = 1, 2 * m do
      fields[j] = ARGV[s + 8 + j]
    end
    redis.call('HSET', key, unpack(fields))
    if score == '' then
      score = nows
      redis.call('HSET', key, ARGV[s + 6], nows)
    end
    if kind == 'pending' or kind == 'inflight' then
      admit_group(base, key)
      add_live(base, kind, p, score, id)
      if kind == 'pending' then
        redis.call('PUBLISH', ARGV[s + 7], '1')
      else
        add_leases(base, key, id, score)
      end
    else
      redis.call('ZADD', base .. kind, score, id)
      if kind == 'dead' then
        group_add(base, key, id, score)
      end
    end
    if registry ~= '' then
      redis.call('SADD', registry, queue)
    end
  end
end
return {'OK', stored}
