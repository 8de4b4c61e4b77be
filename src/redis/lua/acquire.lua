-- acquire: take n = ARGV[3] tokens (0..cap; 0: nothing) at the earliest instant they fit
-- (`fits`), never before the last booking (first come, first served across processes): if
-- that is now, or, with `book`, within the booking horizon (`ahead`), when they are counted
-- at once for that instant (so later requests of any process line up behind them) and the
-- caller goes then. With `book` = 2, counted now whether they fit or not (a settlement's overrun,
-- owed: the clamps bound the debt).
-- Returns {admitted 0|1, wait µs until they fit (admitted: until the booked instant), µs
-- until the state no longer matters, the admission's instant (µs; 0 when refused), which a
-- release of a booking names}.
local n = x
if n == 0 then return {1, 0, algo.later(q) - now, now} end
if n < 1 or n > q.cap then return redis.error_reply('ERR tower-throttle: bad arguments') end
local at = now
if book ~= 2 then at = algo.fits(q, n, now) end
local limit = 0
if book == 1 then limit = q.ahead end
if at - now > limit then
  algo.keep(q)
  return {0, at - now, algo.later(q) - now, 0}
end
algo.take(q, n, at)
return {1, at - now, algo.later(q) - now, at}
