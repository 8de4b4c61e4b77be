-- acquire: take n = ARGV[3] tokens (1..L) at the earliest instant the tokens of the last W
-- µs and the ramp after a pause leave room for them, never before the newest entry (`tail`:
-- first come, first served across processes): if that is now, or — with `book` — within
-- the booking horizon HW, when the entry is logged at that instant at once.
-- Returns {admitted 0|1, wait µs until they fit (admitted: until the booked instant), µs
-- until the state no longer matters, the admission's instant (µs; 0 when refused)}.
local n = x
if n < 1 or n > L then return redis.error_reply('ERR tower-throttle: bad arguments') end
local at = ramp_earliest(earliest, n, math.max(base, tail()))
local limit = 0
if book == 1 then limit = HW end
if at - now > limit then
  local stale = newest ~= nil and redis.call('PTTL', log) < 0
  if stale or must_repair(dirty, horizon()) then save() end
  return {0, at - now, horizon() - now, 0}
end
add(at, n)
ramp_commit(n, at)
save()
return {1, at - now, horizon() - now, at}
