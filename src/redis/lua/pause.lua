-- pause: hold every admission for d = ARGV[3] µs (at most P), then restart as from an empty
-- limit (`hold`). A shorter pause never shortens a longer one.
-- Returns {1, µs until the pause ends, µs until the state no longer matters}.
local d = x
if d > P then d = P end
local ends = algo.hold(q, d)
forget_ranks()
return {1, ends - now, algo.later(q) - now}
