
-- acquire: take n = ARGV[3] tokens (1..B) if they fit.
-- Returns {admitted 0|1, wait µs until they fit, µs until the bucket is full again}.
local n = x
if n < 1 or n > B then return redis.error_reply('ERR tower-throttle: bad arguments') end
local new_tat = tat + n * T
local wait = new_tat - tau - now
if wait > 0 then
  -- Refused. Write only to persist a clamp or to repair a missing or too-long TTL.
  local ttl = redis.call('PTTL', key)
  local want = math.ceil((math.max(tat, pause) - now) / 1000)
  if dirty or ttl < 0 or ttl > want + 1 then save(tat, pause) end
  return {0, wait, tat - now}
end
save(new_tat, pause)
return {1, 0, new_tat - now}
