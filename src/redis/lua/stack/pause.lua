-- pause, for a plan: every quota holds every admission for d = ARGV[3] µs (at most its P),
-- then restarts as from empty (`hold`).
-- Returns {1, µs until the pause ends, µs until the state no longer matters}.
local d = tonumber(ARGV[3])
local ends = now
for i = 1, K do
  local p = math.min(d, tonumber(ARGV[(i - 1) * 14 + 4]))
  ends = math.max(ends, parts[i].hold(p))
end
commit()
return {1, ends - now, later() - now}
