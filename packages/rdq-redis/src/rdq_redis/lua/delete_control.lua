-- Delete the control record of one key of one queue if its version is the expected one, with
-- its rate bucket and lease set. Tasks it held back go back to the due sets with the next
-- claims (see claim_due.lua). Waiters are woken.
--
-- KEYS[1] the queue's levels set.
-- ARGV: key base, key, expected version, the controlled queues' registry key or '' (Cluster),
--   queue name.
-- Returns {'OK', 1 if the queue has no control left else 0}, {'NONE'} when there is no such
--   control, or {'CONFLICT', HGETALL of the stored control}.
local base, k = ARGV[1], ARGV[2]
local expected = tonumber(ARGV[3])
local registry, queue = ARGV[4], ARGV[5]
local ckey = base .. 'ctl:' .. k
local version = redis.call('HGET', ckey, 'version')
if not version then
  return {'NONE'}
end
if (as_int(version) or -1) ~= expected then
  return {'CONFLICT', redis.call('HGETALL', ckey)}
end
if k == '*' and redis.call('HEXISTS', ckey, 'fair') == 1 then
  redis.call('DEL', ckey)
  regroup(base, nil) -- no group sets any more
end
redis.call('DEL', ckey, base .. 'lease:' .. k)
redis.call('SREM', base .. 'controls', k)
local empty = redis.call('EXISTS', base .. 'controls') == 0
if empty and registry ~= '' then
  redis.call('SREM', registry, queue)
end
redis.call('PUBLISH', base .. 'wake', '1')
return {'OK', empty and 1 or 0}
