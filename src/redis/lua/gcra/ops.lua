-- Token and leaky bucket: the operations every script names (`lua/acquire.lua`,
-- `lua/pause.lua`, `lua/release.lua`, `lua/stack/*.lua`), of a quota `q` once loaded.
-- The earliest instant at or after `from` at which n tokens fit: tat moves to
-- max(tat, at) + n·T and the request goes max(tau, n·T) before that. For the token bucket
-- (n·T <= tau) plain GCRA; for the leaky bucket (tau = T) once the previous request has
-- drained, so an idle leaky bucket admits any allowed cost at once and its n tokens drain
-- over the next n intervals.
local function fits(q, n, from)
  local cost = n * q.T
  return math.max(from, q.tat + cost - math.max(q.tau, cost))
end
-- Count n tokens admitted at `at` (at or after `fits`).
local function take(q, n, at)
  q.tat = math.max(q.tat, at) + n * q.T
  save(q, q.tat, q.pause)
end
-- A refusal writes only to persist a clamp or to repair a missing or too-long TTL.
local function keep(q)
  if must_repair(q, q.dirty, horizon(q.tat, q.pause)) then save(q, q.tat, q.pause) end
end
-- The instant the state no longer matters (at least now).
local function later(q)
  return math.max(horizon(q.tat, q.pause), now)
end
-- Give back n tokens of an admission that was not used. Exact while the bucket has not
-- refilled past it: tat moves back by n·T, never below now (a full bucket) and never before
-- a pause's restart. (No instant needed: the third argument is unused.)
local function give(q, n, _)
  local tat, pause = q.tat, q.pause
  if tat <= now then return end
  local to = tat - n * q.T
  if to < now then to = now end
  if pause > now and to < pause + q.tau - q.T then to = pause + q.tau - q.T end
  if to < tat then
    q.tat = to
    save(q, to, pause)
  end
end
-- Hold every admission for d µs, then restart from an empty bucket whose first token is
-- due when the pause ends. Returns the end of the pause.
local function hold(q, d)
  if now + d > q.pause then q.pause = now + d end
  local floor = q.pause + q.tau - q.T
  if q.tat < floor then q.tat = floor end
  save(q, q.tat, q.pause)
  return q.pause
end
