-- acquire: take n = ARGV[3] tokens (1..L) at the earliest instant the window model
-- (`earliest`) and the ramp after a pause let them in, never before the last booking
-- (`tail`: first come, first served across processes): if that is now, or — with `book` —
-- within the booking horizon HW, when the tokens are booked for that instant (counted at
-- once in its window, so later requests of any process line up behind them).
-- Returns {admitted 0|1, wait µs until they fit (admitted: until the booked instant), µs
-- until the state no longer matters, the admission's instant (µs; 0 when refused), which a
-- release of a booking names}.
local n = x
if n < 1 or n > L then return redis.error_reply('ERR tower-throttle: bad arguments') end
local at = ramp_earliest(earliest, n, math.max(base, tail()))
local limit = 0
if book == 1 then limit = HW end
if at - now > limit then
  if must_repair(dirty, horizon()) then save() end
  return {0, at - now, horizon() - now, 0}
end
admit(n, at)
ramp_commit(n, at)
save()
return {1, at - now, horizon() - now, at}
