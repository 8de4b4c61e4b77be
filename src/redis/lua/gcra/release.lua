-- release: give back n = ARGV[3] tokens (1..B) of an admission that another limit refused
-- right after. Exact while the bucket has not refilled past it: tat moves back by n·T, never
-- below now (a full bucket) and never before a pause's restart.
-- Returns {1, 0, µs until the bucket is full again}.
local n = x
if n < 1 or n > B then return redis.error_reply('ERR tower-throttle: bad arguments') end
if tat > now then
  local back = tat - n * T
  if back < now then back = now end
  if pause > now and back < pause + tau - T then back = pause + tau - T end
  if back < tat then
    tat = back
    save(tat, pause)
  end
end
return {1, 0, full_in(tat)}
