-- pause, for a plan: every quota holds every admission for d = ARGV[3] µs (at most P),
-- then restarts as from empty (`hold`).
-- Returns {1, µs until the pause ends, µs until the state no longer matters}.
local d = math.min(x, P)
local ends = now
for i = 1, K do ends = math.max(ends, ALGOS[i].hold(parts[i], d)) end
return {1, ends - now, commit() - now}
