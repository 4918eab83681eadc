-- Helpers shared by every rdq script; rdq_redis prepends this file to each script it loads.
--
-- Times are integer microseconds since the Unix epoch, read from the server's TIME (the
-- storage clock). They stay exact in Lua's doubles (< 2^53) as long as they are turned into
-- strings with fmt(): tostring() would round them to 14 significant digits.

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

-- Append one JSON attempt record to the task's JSON array of attempts and remember the
-- attempt's error type (DLQ filters match the error type of the last attempt).
local function append_attempt(key, attempt_json, error_type)
  local list = redis.call('HGET', key, 'attempts')
  if not list or list == '' or list == '[]' then
    list = '[' .. attempt_json .. ']'
  else
    list = string.sub(list, 1, -2) .. ',' .. attempt_json .. ']'
  end
  redis.call('HSET', key, 'attempts', list)
  if error_type ~= '' then
    redis.call('HSET', key, 'error_type', error_type)
  else
    redis.call('HDEL', key, 'error_type')
  end
end

-- Fencing: 'OK' if `token` holds the task's lease, 'STALE' if it does not, 'NOTFOUND' if the
-- task is not in this queue.
local function check_claim(key, token)
  local f = redis.call('HMGET', key, 'status', 'token')
  if not f[1] then
    return 'NOTFOUND'
  end
  if f[1] ~= 'IN_FLIGHT' or f[2] ~= token then
    return 'STALE'
  end
  return 'OK'
end

-- What every resolution of a held claim does: append the attempt, count it, drop the lease.
-- The caller then sets the new status and puts the task in its new set.
local function finish_claim(key, inflight_key, id, attempt_json, error_type)
  append_attempt(key, attempt_json, error_type)
  redis.call('HINCRBY', key, 'attempt_count', 1)
  redis.call('HDEL', key, 'token', 'lease_expires_at', 'claimed_at')
  redis.call('ZREM', inflight_key, id)
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

-- A DLQ filter value is '' when the filter does not constrain that field, else '=' .. value.
local function dead_matches(key, handler_filter, error_filter)
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
-- Ids are only candidates: callers still check that each task is DEAD.
local function select_dead(dead_key, base, first)
  local mode = ARGV[first]
  if mode == 'ids' then
    local ids = {}
    for i = first + 1, #ARGV do
      ids[#ids + 1] = ARGV[i]
    end
    return ids
  end
  local handler_filter, error_filter = ARGV[first + 3], ARGV[first + 4]
  local ids = {}
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', dead_key, ARGV[first + 1], ARGV[first + 2])) do
    if dead_matches(task_key(base, id), handler_filter, error_filter) then
      ids[#ids + 1] = id
    end
  end
  return ids
end

