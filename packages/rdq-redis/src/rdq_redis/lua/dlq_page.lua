-- Read DLQ entries in (dead_lettered_at, id) order after a keyset position, keeping those
-- that match the filter. Scans at most `budget` entries per call, so one call never blocks
-- the server for long; the client calls again from the returned position.
--
-- KEYS[1] the dead set (score = dead_lettered_at in µs; equal scores order by id bytes).
-- ARGV: key base, after_score or '' (start of the range), after_id, min_score (inclusive),
--   max_score ('+inf' or '(' .. exclusive bound), handler filter, error filter ('' or
--   '=' .. value), want, budget, include_attempts ('1' | '0').
-- Returns {'END', entries} when the range is exhausted, else {'MORE', score, id, entries}
--   where (score, id) is the last entry scanned. Each entry is the task's HGETALL.
local dead, base = KEYS[1], ARGV[1]
local after_score, after_id = ARGV[2], ARGV[3]
local start, max = ARGV[4], ARGV[5]
local handler_filter, error_filter = ARGV[6], ARGV[7]
local want, budget = tonumber(ARGV[8]), tonumber(ARGV[9])
local with_attempts = ARGV[10] == '1'
local out, scanned = {}, 0
local last_score, last_id = after_score, after_id

local function consider(id, score)
  scanned = scanned + 1
  last_score, last_id = score, id
  local key = task_key(base, id)
  if dead_matches(key, handler_filter, error_filter) then
    local h = redis.call('HGETALL', key)
    if not with_attempts then
      local kept = {}
      for k = 1, #h, 2 do
        if h[k] ~= 'attempts' then
          kept[#kept + 1] = h[k]
          kept[#kept + 1] = h[k + 1]
        end
      end
      h = kept
    end
    out[#out + 1] = h
  end
  return #out >= want or scanned >= budget
end

if after_score ~= '' and tonumber(after_score) >= tonumber(start) then
  -- The rest of the cursor's own score first, then strictly greater scores.
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', dead, after_score, after_score)) do
    if bytes_less(after_id, id) and consider(id, after_score) then
      return {'MORE', last_score, last_id, out}
    end
  end
  start = '(' .. after_score
end

local offset = 0
while true do
  local batch = redis.call('ZRANGEBYSCORE', dead, start, max, 'WITHSCORES', 'LIMIT', offset, 128)
  if #batch == 0 then
    return {'END', out}
  end
  for k = 1, #batch, 2 do
    if consider(batch[k], batch[k + 1]) then
      return {'MORE', last_score, last_id, out}
    end
  end
  offset = offset + #batch / 2
end
