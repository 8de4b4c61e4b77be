-- acquire: take n = ARGV[3] tokens (1..B) if they fit. A cost of n·T is admitted at
-- new − tau, new = max(tat + n·T, now + min(n·T, tau)): for the token bucket that is
-- max(tat, now) + n·T; an idle leaky bucket (tau = T) admits any cost at once.
-- Returns {admitted 0|1, wait µs until they fit, µs until the bucket is full again}.
local n = x
if n < 1 or n > B then return redis.error_reply('ERR tower-throttle: bad arguments') end
local cost = n * T
local new_tat = math.max(tat + cost, now + math.min(cost, tau))
local wait = new_tat - tau - now
if wait > 0 then
  -- Refused. Write only to persist a clamp or to repair a missing or too-long TTL.
  if must_repair(dirty, horizon(tat, pause)) then save(tat, pause) end
  return {0, wait, full_in(tat)}
end
save(new_tat, pause)
return {1, 0, full_in(new_tat)}
