-- pause: hold every admission for d = ARGV[3] µs (at most P), then restart as from an empty
-- bucket. A shorter pause never shortens a longer one.
-- Returns {1, µs until the pause ends, µs until the state no longer matters}.
local d = x
if d > P then d = P end
if now + d > pause then
  pause = now + d
  restart_at(pause)
end
save()
return {1, pause - now, horizon() - now}
