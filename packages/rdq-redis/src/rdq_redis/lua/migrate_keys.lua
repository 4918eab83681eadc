-- Upgrade one queue from key layout 2 to 3, a batch of tasks of one set per call: a task whose
-- flow-control keys are only inside its body (layout 2 kept Envelope.keys there) gets them in
-- its 'keys' field too, which the claims read. A body that does not decode, or keys that are
-- not strings without whitespace, are left alone. Idempotent.
-- KEYS[1] the queue's levels set.
-- ARGV: key base, the set (after the base: 'pending:<p>', 'inflight:<p>', 'dead'), rank of
--   the first entry, batch size.
-- Returns the rank to continue from, or -1 when the set is done.
local base, set = ARGV[1], ARGV[2]
local from, batch = tonumber(ARGV[3]), tonumber(ARGV[4])
local ids = redis.call('ZRANGE', base .. set, from, from + batch - 1)
for _, id in ipairs(ids) do
  local key = task_key(base, id)
  if redis.call('HEXISTS', key, 'keys') == 0 then
    local body = redis.call('HGET', key, 'body')
    local ok, obj = false, nil
    if body then
      ok, obj = pcall(cjson.decode, body)
    end
    if ok and type(obj) == 'table' and type(obj.keys) == 'table' then
      local keys = {}
      for _, k in ipairs(obj.keys) do
        if type(k) ~= 'string' or not string.match(k, '^[^%s%c]+$') then
          keys = {}
          break
        end
        keys[#keys + 1] = k
      end
      if #keys > 0 then
        redis.call('HSET', key, 'keys', table.concat(keys, '\n'))
      end
    end
  end
end
if #ids < batch then
  return -1
end
return from + batch
