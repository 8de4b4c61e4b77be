-- release: give back n = ARGV[3] tokens (1..L) of an admission made in the current window
-- (nothing once that window is over), never below empty. The ramp after a pause keeps the
-- place it gave: a release never lets the restart go faster.
-- Returns {1, 0, µs until the state no longer matters}.
local n = x
if n < 1 or n > L then return redis.error_reply('ERR tower-throttle: bad arguments') end
if w == cw and c > 0 then
  c = math.max(c - n, 0)
  save()
end
return {1, 0, horizon() - now}
