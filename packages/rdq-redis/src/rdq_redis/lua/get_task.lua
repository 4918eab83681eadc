-- One task and the status its index gives it (what scheduling follows, whatever its status
-- field says).
-- KEYS[1] the task hash. ARGV: key base, id.
-- Returns {status or '' (in no index), HGETALL}.
local base, id = ARGV[1], ARGV[2]
local key = KEYS[1]
local fields = redis.call('HGETALL', key)
if #fields == 0 then
  return {'', fields}
end
local status = ''
local set, _, kind = find_live(base, key, id)
if set then
  status = kind == 'pending' and 'PENDING' or 'IN_FLIGHT'
elseif redis.call('ZSCORE', base .. 'dead', id) then
  status = 'DEAD'
elseif redis.call('ZSCORE', base .. 'succeeded', id) then
  status = 'SUCCEEDED'
elseif redis.call('ZSCORE', base .. 'cancelled', id) then
  status = 'CANCELLED'
end
return {status, fields}
