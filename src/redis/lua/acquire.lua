-- acquire: take n = ARGV[3] tokens (0..cap; 0: nothing) at the earliest instant they fit
-- (`fits`), never before the last booking (first come, first served across processes): if
-- that is now, or, with `book`, within the booking horizon (`ahead`), when they are counted
-- at once for that instant (so later requests of any process line up behind them) and the
-- caller goes then. With `book` = 2, counted now whether they fit or not (a settlement's overrun,
-- owed: the clamps bound the debt).
-- A request of another class than critical leaves `need` = ARGV[9] tokens free after it
-- (the reserve for critical requests); a booking takes its class's place
-- (`lua/classes.lua`).
-- Returns {admitted 0|1, wait µs until they fit (admitted: until the booked instant), µs
-- until the state no longer matters, the admission's instant (µs; 0 when refused), which a
-- release of a booking names}, and refused, 0, then why: 0 the limit, 1 only the reserve
-- for critical requests, 2 the class's share.
local n = x
if n == 0 then return {1, 0, algo.later(q) - now, now} end
if n < 1 or n > q.cap then return redis.error_reply('ERR tower-throttle: bad arguments') end
local at = now
if book ~= 2 then at = algo.fits(q, math.min(n + need, q.cap), now) end
local limit = 0
if book == 1 then limit = q.ahead end
if at - now > limit then
  algo.keep(q)
  local shed = 0
  if need > 0 and algo.fits(q, n, now) - now <= limit then shed = 1 end
  wanted(at - now - limit, q.ahead, q.T)
  return {0, at - now, algo.later(q) - now, 0, 0, shed}
end
local wait = refused_share(n, at, q.ahead, q.T)
if wait then
  algo.keep(q)
  return {0, wait, algo.later(q) - now, 0, 0, 2}
end
algo.take(q, n, at)
return {1, at - now, algo.later(q) - now, at}
