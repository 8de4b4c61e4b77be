-- acquire: take n = ARGV[3] tokens (1..CAP) at the earliest instant they fit (`fits`), never
-- before the last booking (first come, first served across processes): if that is now, or,
-- with `book`, within the booking horizon AHEAD, when they are counted at once for that
-- instant (so later requests of any process line up behind them) and the caller goes then.
-- Returns {admitted 0|1, wait µs until they fit (admitted: until the booked instant), µs
-- until the state no longer matters, the admission's instant (µs; 0 when refused), which a
-- release of a booking names}.
local n = x
if n < 1 or n > CAP then return redis.error_reply('ERR tower-throttle: bad arguments') end
local at = fits(n, now)
local limit = 0
if book == 1 then limit = AHEAD end
if at - now > limit then
  keep()
  return {0, at - now, later() - now, 0}
end
take(n, at)
return {1, at - now, later() - now, at}
