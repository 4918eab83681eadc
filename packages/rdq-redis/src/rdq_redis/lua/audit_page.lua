-- Read audit entries newest first ((time, id) descending) before a keyset position, keeping
-- those that match the filter; at most `budget` entries scanned per call.
-- KEYS[1] the audit log. ARGV: audit key base, after_score or '' (from the newest), after_id,
--   min score (inclusive) or '', max score (exclusive) or '', queue, action and actor filters
--   ('' or '=' .. value), want, budget.
-- Returns {'END', entries} or {'MORE', score, id, entries}; each entry is
--   {id, score, HGETALL of the entry}.
local log, base = KEYS[1], ARGV[1]
local after_score, after_id = ARGV[2], ARGV[3]
local low, high = ARGV[4], ARGV[5]
local filters = {queue = ARGV[6], action = ARGV[7], actor = ARGV[8]}
local want, budget = tonumber(ARGV[9]), tonumber(ARGV[10])
local after = after_score ~= '' and tonumber(after_score) or nil
local low_n = low ~= '' and tonumber(low) or nil
local BATCH = 64

local rank = 0
if after then
  local s = redis.call('ZSCORE', log, after_id)
  if s and tonumber(s) == after then
    rank = redis.call('ZREVRANK', log, after_id) + 1
  else
    rank = redis.call('ZCOUNT', log, '(' .. after_score, '+inf')
  end
end
if high ~= '' then
  rank = math.max(rank, redis.call('ZCOUNT', log, high, '+inf'))
end

local out, scanned = {}, 0
while true do
  local got = redis.call('ZREVRANGE', log, rank, rank + BATCH - 1, 'WITHSCORES')
  if #got == 0 then
    return {'END', out}
  end
  rank = rank + #got / 2
  for k = 1, #got, 2 do
    local id, raw = got[k], got[k + 1]
    local score = tonumber(raw)
    if low_n and score < low_n then
      return {'END', out}
    end
    if not (after and (score > after or (score == after and not bytes_less(id, after_id)))) then
      scanned = scanned + 1
      local key = base .. 'entry:' .. id
      local f = redis.call('HMGET', key, 'queue', 'action', 'actor')
      local keep = true
      for i, name in ipairs({'queue', 'action', 'actor'}) do
        local want_value = filters[name]
        if want_value ~= '' and f[i] ~= string.sub(want_value, 2) then
          keep = false
        end
      end
      if keep then
        out[#out + 1] = {id, raw, redis.call('HGETALL', key)}
      end
      if #out >= want or scanned >= budget then
        return {'MORE', raw, id, out}
      end
    end
  end
end
