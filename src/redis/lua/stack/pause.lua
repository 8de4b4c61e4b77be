-- pause, for a plan: each quota holds every admission for its own d = its ARGV[3] µs (at
-- most P; 0: that quota is not paused), then restarts as from empty (`hold`).
-- Returns {1, µs until the pause ends, µs until the state no longer matters}.
local ends = now
for i = 1, K do
  local d = math.min(tonumber(ARGV[(i - 1) * 14 + 3]) or 0, P)
  if d > 0 then ends = math.max(ends, ALGOS[i].hold(parts[i], d)) end
end
forget_ranks()
return {1, ends - now, commit() - now}
