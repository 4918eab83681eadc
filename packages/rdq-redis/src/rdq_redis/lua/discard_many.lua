-- Complete claimed tasks of one queue by deleting them (a queue configured
-- keep_succeeded = false), each fenced on its own token exactly as complete_many.lua fences
-- it (the whole call is atomic, too): its claim released as a resolution releases it (the
-- in-flight set, the lease sets of its keys), its dedup record dropped, its hash and (indexed
-- only) its id index entry deleted. A task listed twice is deleted once; the second entry
-- finds it gone.
-- KEYS[1] the queue's levels set.
-- ARGV: key base, key prefix, indexed ('1' | '0': on Redis Cluster the client deletes the
--   index entries), queue registry key or '' (Cluster), queue name, then (id, token) per item.
-- Returns {one of 'OK', 'STALE', 'NOTFOUND' (not in this queue) per item, in order; ids
-- deleted; 1 if the queue is now empty else 0}.
local base, prefix, indexed = ARGV[1], ARGV[2], ARGV[3] == '1'
local registry, queue = ARGV[4], ARGV[5]
local out, deleted = {}, {}
for a = 6, #ARGV, 2 do
  local id = ARGV[a]
  local key = task_key(base, id)
  local held = check_claim(key, ARGV[a + 1])
  if held == 'OK' then
    local f = redis.call('HMGET', key, 'held', 'priority', 'fg')
    release_claim(base, key, id, f[1], f[2], f[3])
    drop_dedup(base, key, id)
    redis.call('DEL', key)
    if indexed then
      redis.call('DEL', index_key(prefix, id))
    end
    deleted[#deleted + 1] = id
  end
  out[#out + 1] = held
end
local empty = 0
if #deleted > 0 and queue_empty(base) then
  empty = 1
  if registry ~= '' then
    redis.call('SREM', registry, queue)
  end
end
return {out, deleted, empty}
