-- Read the tasks of one status in (status time, id) order after a keyset position, keeping
-- those that match the filter. Serves list_tasks and dlq_list. Scans at most `budget` entries
-- per call, so one call never blocks the server for long; the client calls again from the
-- returned position.
--
-- A status's index is one sorted set (dead, succeeded, cancelled) or one per priority
-- (pending, in-flight; with the held sets of the tasks a claim held back), merged here; equal
-- scores order by id bytes, which is the keyset order. Sets are read by rank from the keyset
-- position (found with ZRANK or ZCOUNT), so a page costs O(log n + page) per set, however
-- deep it is.
--
-- KEYS[1] the queue's levels set.
-- ARGV: key base, status set ('pending' | 'inflight' | 'dead' | 'succeeded' | 'cancelled'),
--   after_score or '' (from the start), after_id, min score (inclusive) or '', max score
--   (exclusive) or '', handler filter, error filter ('' or '=' .. value), want, budget,
--   include_attempts ('1' | '0').
-- Returns {'END', entries} when the range is exhausted, else {'MORE', score, id, entries}
--   where (score, id) is the last entry scanned. Each entry is {id, score, HGETALL}.
local base, kind = ARGV[1], ARGV[2]
local after_score, after_id = ARGV[3], ARGV[4]
local low, high = ARGV[5], ARGV[6]
local handler_filter, error_filter = ARGV[7], ARGV[8]
local want, budget = tonumber(ARGV[9]), tonumber(ARGV[10])
local with_attempts = ARGV[11] == '1'
local after = after_score ~= '' and tonumber(after_score) or nil
local high_n = high ~= '' and tonumber(high) or nil
local BATCH = 64

local sets = {}
if kind == 'pending' or kind == 'inflight' then
  for _, p in ipairs(levels(base)) do
    sets[#sets + 1] = base .. kind .. ':' .. p
  end
  -- the tasks a claim held back, scored the same way
  for _, name in ipairs(held_names(base, kind == 'pending' and 'held' or 'heldlost')) do
    sets[#sets + 1] = base .. name
  end
else
  sets[1] = base .. kind
end

-- One cursor per set: the rank it reads from and a buffer of {id, score} pairs.
local function start_rank(set)
  local rank = 0
  if after then
    local s = redis.call('ZSCORE', set, after_id)
    if s and tonumber(s) == after then
      rank = redis.call('ZRANK', set, after_id) + 1
    else
      rank = redis.call('ZCOUNT', set, '-inf', '(' .. after_score)
    end
  end
  if low ~= '' then
    rank = math.max(rank, redis.call('ZCOUNT', set, '-inf', '(' .. low))
  end
  return rank
end

local cursors = {}
for _, set in ipairs(sets) do
  cursors[#cursors + 1] = {set = set, rank = start_rank(set), buf = {}, pos = 1, done = false}
end

-- The cursor's next {id, score}, or nil when it is exhausted.
local function peek(c)
  while not c.done do
    if c.pos > #c.buf then
      local got = redis.call('ZRANGE', c.set, c.rank, c.rank + BATCH - 1, 'WITHSCORES')
      c.buf, c.pos = {}, 1
      for k = 1, #got, 2 do
        c.buf[#c.buf + 1] = {got[k], tonumber(got[k + 1]), got[k + 1]}
      end
      c.rank = c.rank + #c.buf
      if #c.buf == 0 then
        c.done = true
        return nil
      end
    end
    local e = c.buf[c.pos]
    if high_n and e[2] >= high_n then
      c.done = true
      return nil
    end
    -- Entries at or before the keyset position (reached through ZCOUNT when the position's
    -- own task has moved) are skipped without counting against the budget.
    if after and (e[2] < after or (e[2] == after and not bytes_less(after_id, e[1]))) then
      c.pos = c.pos + 1
    else
      return e
    end
  end
  return nil
end

local out, scanned = {}, 0
while true do
  local best, best_c = nil, nil
  for _, c in ipairs(cursors) do
    local e = peek(c)
    if e and (best == nil or e[2] < best[2] or (e[2] == best[2] and bytes_less(e[1], best[1]))) then
      best, best_c = e, c
    end
  end
  if best == nil then
    return {'END', out}
  end
  best_c.pos = best_c.pos + 1
  scanned = scanned + 1
  local id = best[1]
  local key = task_key(base, id)
  -- (An index entry whose hash is gone is not a task: never expected, skipped.)
  if redis.call('EXISTS', key) == 1 and task_matches(key, handler_filter, error_filter) then
    local h = redis.call('HGETALL', key)
    if not with_attempts then
      -- Attempts are left out, unless they do not look like a JSON array: then the client
      -- decodes them to say what is wrong.
      local kept = {}
      for k = 1, #h, 2 do
        local v = h[k + 1]
        if h[k] ~= 'attempts' or string.sub(v, 1, 1) ~= '[' or string.sub(v, -1) ~= ']' then
          kept[#kept + 1] = h[k]
          kept[#kept + 1] = v
        end
      end
      h = kept
    end
    out[#out + 1] = {id, best[3], h}
  end
  if #out >= want or scanned >= budget then
    return {'MORE', best[3], id, out}
  end
end
