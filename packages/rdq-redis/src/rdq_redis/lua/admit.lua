-- Admit one task under a dedup key, atomically: the id checked first (as enqueue.lua), then
-- the key's holder; the task is stored (exactly as enqueue.lua stores one: kept in step with
-- it by the kit's round-trip clauses) only when the key is free, and takes it.
-- KEYS[1] the queue's levels set (the queue's slot).
-- ARGV: indexed ('1': this script keeps the id and key indexes; '0' on Cluster, where the
--   client does), queue registry key or '', key prefix, then enqueue.lua's 14 values of the
--   task (queue, id, base, body, next_at_us or '', delay_us, attempt_count, redrive_count,
--   attempts_json, handler_ref, last error, wake channel, priority, keys), then the dedup key,
--   mode, window_us or '', max_age_us or ''.
-- Returns {outcome, task id, queue} with outcome 'added', 'skipped' or 'extended'; or
--   {'replace', holder, queue, body, created_at}: a PENDING holder to replace (the client
--   builds its new body and calls dedup_replace.lua); or {'IDCONFLICT', id, queue} /
--   {'DEDUPCONFLICT', holder, queue}.
local now = now_us()
local indexed, registry, prefix = ARGV[1] == '1', ARGV[2], ARGV[3]
local a = 3
local queue, id, base = ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
local k, mode = ARGV[a + 15], ARGV[a + 16]
local window_us, max_age_us = ARGV[a + 17], ARGV[a + 18]
local key = task_key(base, id)

if indexed then
  local owner = redis.call('GET', index_key(prefix, id))
  if owner and owner ~= queue then
    return {'IDCONFLICT', id, owner}
  end
  if owner then
    return {'skipped', id, queue}
  end
elseif redis.call('EXISTS', key) == 1 then
  return {'skipped', id, queue}
end

if indexed then
  local elsewhere = redis.call('GET', dedup_index_key(prefix, k))
  if elsewhere and elsewhere ~= queue then
    local other = prefix .. ':{' .. elsewhere .. '}:'
    local held, holder = dedup_held(other, dedup_key(other, k), now)
    if held then
      return {'DEDUPCONFLICT', holder, elsewhere}
    end
  end
end

local record = dedup_key(base, k)
local held, holder, status, created = dedup_held(base, record, now)
if held then
  if mode == 'extend' and window_us ~= '' then
    redis.call('HSET', record, 'until', fmt(now + tonumber(window_us)))
    return {'extended', holder, queue}
  end
  if (mode == 'replace' or mode == 'debounce') and status == 'PENDING' then
    return {'replace', holder, queue, redis.call('HGET', task_key(base, holder), 'body'),
            created or ''}
  end
  return {'skipped', holder, queue}
end

-- free: store the task as enqueue.lua does, and give it the key
local due
if ARGV[a + 5] ~= '' then
  due = ARGV[a + 5]
else
  due = fmt(now + tonumber(ARGV[a + 6]))
end
if indexed then
  redis.call('SET', index_key(prefix, id), queue)
  redis.call('SET', dedup_index_key(prefix, k), queue)
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
  'next_attempt_at', due,
  'dedup', k)
set_error_type(key, ARGV[a + 11])
if ARGV[a + 14] ~= '' then
  redis.call('HSET', key, 'keys', ARGV[a + 14])
end
add_live(base, 'pending', priority, due, id)
if registry ~= '' then
  redis.call('SADD', registry, queue)
end
redis.call('DEL', record)
redis.call('HSET', record, 'task', id)
if window_us ~= '' then
  redis.call('HSET', record, 'until', fmt(now + tonumber(window_us)))
end
redis.call('PUBLISH', ARGV[a + 12], '1')
return {'added', id, queue}
