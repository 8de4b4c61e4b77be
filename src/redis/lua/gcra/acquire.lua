-- acquire: take n = ARGV[3] tokens (1..B) if they fit. tat moves to max(tat, now) + n·T and
-- the request goes max(tau, n·T) before that: for the token bucket (n·T <= tau) plain GCRA;
-- for the leaky bucket (tau = T) once the previous request has drained, so an idle leaky
-- bucket admits any allowed cost at once and its n tokens drain over the next n intervals.
-- With `book`, a request whose wait is within the horizon H is admitted now for the instant
-- now + wait: the bucket is charged at once (so later requests, of any process, line up
-- behind it: first come, first served) and the caller goes at that instant.
-- Returns {admitted 0|1, wait µs until they fit (admitted: until the reserved instant),
-- µs until the bucket is full again}.
local n = x
if n < 1 or n > B then return redis.error_reply('ERR tower-throttle: bad arguments') end
local cost = n * T
local new_tat = math.max(tat, now) + cost
local wait = new_tat - math.max(tau, cost) - now
local limit = 0
if book == 1 then limit = H end
if wait > limit then
  -- Refused. Write only to persist a clamp or to repair a missing or too-long TTL.
  if must_repair(dirty, horizon(tat, pause)) then save(tat, pause) end
  return {0, wait, full_in(tat)}
end
save(new_tat, pause)
if wait < 0 then wait = 0 end
return {1, wait, full_in(new_tat)}
