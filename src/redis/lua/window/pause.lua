-- pause: hold every admission for d = ARGV[3] µs (at most P), then restart on the ramp: one
-- token when the pause ends, then one per interval, until the window's bound takes over
-- (`restart_at` forgets what must not come back as a burst, and says when). A shorter pause
-- never shortens a longer one.
-- Returns {1, µs until the pause ends, µs until the state no longer matters}.
local d = x
if d > P then d = P end
if now + d > pause then
  pause = now + d
  ramp_start(pause, restart_at(pause))
end
save()
return {1, pause - now, horizon() - now}
