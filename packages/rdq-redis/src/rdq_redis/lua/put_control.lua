-- Write the control record of one key of one queue if its stored version is the expected one
-- (0: there is none yet): compare-and-set, so of racing writers exactly one succeeds.
--
-- The new record gets version expected + 1 and updated_at = now. A new control, or a change of
-- rate, per or bucket, empties the rate bucket's state (it starts full again). A new control of
-- a key other than '*' gets the key's lease set, built from the queue's in-flight tasks (a
-- one-time scan of them: from then on every script that leases or frees a task keeps it).
-- Waiters are woken: what the claims may take has changed.
--
-- KEYS[1] the queue's levels set (it routes the call on Cluster).
-- ARGV: key base, key, expected version, the controlled queues' registry key or '' (on Redis
--   Cluster the client keeps it), queue name, paused ('1' | '0'), then gate, concurrency,
--   rate, per, burst, bucket ('' for none), state JSON, then fair (the key prefix) and aging
--   (seconds), '' for none: the claim order of the queue's own control (see _order.lua).
-- Returns {'OK', version, updated_at_us} or {'CONFLICT', HGETALL of the stored control (empty
--   when there is none)}.
local nows = fmt(now_us())
local base, k = ARGV[1], ARGV[2]
local expected = tonumber(ARGV[3])
local registry, queue = ARGV[4], ARGV[5]
local ckey = base .. 'ctl:' .. k
local before = redis.call('HMGET', ckey, 'version', 'rate', 'per', 'bucket', 'fair')
local version = before[1] and (as_int(before[1]) or -1) or 0
if version ~= expected then
  return {'CONFLICT', redis.call('HGETALL', ckey)}
end
local rate, per, bucket = ARGV[9], ARGV[10], ARGV[12]
local stored = fmt(expected + 1)
local fields = {'version', stored, 'updated_at', nows, 'per', per, 'state', ARGV[13]}
local gone = {}
local function optional(name, value)
  if value ~= '' then
    fields[#fields + 1] = name
    fields[#fields + 1] = value
  else
    gone[#gone + 1] = name
  end
end
optional('paused', ARGV[6] == '1' and '1' or '')
optional('gate', ARGV[7])
optional('concurrency', ARGV[8])
optional('rate', rate)
optional('burst', ARGV[11])
optional('bucket', bucket)
optional('fair', ARGV[14])
optional('aging', ARGV[15])
if not before[1] or rate == '' or (before[2] or '') ~= rate or (before[3] or '') ~= per
    or (before[4] or '') ~= bucket then
  gone[#gone + 1] = 'tokens'
  gone[#gone + 1] = 'refilled'
end
if #gone > 0 then
  redis.call('HDEL', ckey, unpack(gone))
end
redis.call('HSET', ckey, unpack(fields))
redis.call('SADD', base .. 'controls', k)
if k == '*' and (before[5] or '') ~= ARGV[14] then
  regroup(base, ARGV[14] ~= '' and ARGV[14] or nil) -- the group sets by the new prefix
end
if registry ~= '' then
  redis.call('SADD', registry, queue)
end

if not before[1] and k ~= '*' then
  local lease = base .. 'lease:' .. k
  redis.call('DEL', lease)
  local sets = {}
  for _, p in ipairs(levels(base)) do
    sets[#sets + 1] = inflight_key(base, p)
  end
  for _, name in ipairs(held_names(base, 'heldlost')) do
    sets[#sets + 1] = base .. name
  end
  for _, set in ipairs(sets) do
    local entries = redis.call('ZRANGE', set, 0, -1, 'WITHSCORES')
    for i = 1, #entries, 2 do
      for _, key in ipairs(task_flow_keys(task_key(base, entries[i]))) do
        if key == k then
          redis.call('ZADD', lease, entries[i + 1], entries[i])
          break
        end
      end
    end
  end
end
redis.call('PUBLISH', base .. 'wake', '1')
return {'OK', stored, nows}
