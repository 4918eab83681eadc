-- When the next task of one queue may be claimed, by the server clock.
--
-- Without controls: the earliest head of its pending and in-flight sets. With them, a due
-- time waits for the queue's own control ('*') to let a task through (never, while it is
-- paused or its gate is spent: a change of the control wakes the waiters), and the tasks a
-- claim held back count from when their key's control lets one through again (a free slot, a
-- rate token; now, when the control is gone or admits already).
-- KEYS[1] the queue's levels set. ARGV[1] the queue's key base.
-- Returns {now_us, earliest due score or ''}.
local now = now_us()
local base = ARGV[1]
local best = ''
for _, p in ipairs(levels(base)) do
  for _, set in ipairs({pending_key(base, p), inflight_key(base, p)}) do
    local first = redis.call('ZRANGE', set, 0, 0, 'WITHSCORES')
    if #first > 0 and (best == '' or tonumber(first[2]) < tonumber(best)) then
      best = first[2]
    end
  end
end
if redis.call('EXISTS', base .. 'controls', base .. 'heldkeys') == 0 then
  return {fmt(now), best}
end

local controls = {}
local function control(k)
  local c = controls[k]
  if c == nil then
    c = load_control(base, k, now) or false
    controls[k] = c
  end
  return c or nil
end

local best_n = best ~= '' and tonumber(best) or nil
for _, name in ipairs(redis.call('SMEMBERS', base .. 'heldkeys')) do
  local kind, _, k = parse_held(name)
  if kind and redis.call('EXISTS', base .. name) == 1 then
    local at = free_at(base, control(k), now)
    if at and (best_n == nil or at < best_n) then
      best_n = at
      best = fmt(at)
    end
  end
end
local queue_control = control(QUEUE_KEY)
if queue_control and best_n then
  local at = free_at(base, queue_control, now)
  if at == nil then
    best = ''
  elseif at > best_n then
    best = fmt(at)
  end
end
return {fmt(now), best}
