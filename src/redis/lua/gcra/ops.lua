-- Token and leaky bucket: the operations every script names (`lua/acquire.lua`,
-- `lua/pause.lua`, `lua/release.lua`, `lua/stack/*.lua`).
-- The most tokens one request takes, and how far ahead a waiter may book (H).
local CAP, AHEAD = B, H
-- The earliest instant at or after `from` at which n tokens fit: tat moves to
-- max(tat, at) + n·T and the request goes max(tau, n·T) before that. For the token bucket
-- (n·T <= tau) plain GCRA; for the leaky bucket (tau = T) once the previous request has
-- drained, so an idle leaky bucket admits any allowed cost at once and its n tokens drain
-- over the next n intervals.
local function fits(n, from)
  local cost = n * T
  return math.max(from, tat + cost - math.max(tau, cost))
end
-- Count n tokens admitted at `at` (at or after `fits`).
local function take(n, at)
  tat = math.max(tat, at) + n * T
  save(tat, pause)
end
-- A refusal writes only to persist a clamp or to repair a missing or too-long TTL.
local function keep()
  if must_repair(dirty, horizon(tat, pause)) then save(tat, pause) end
end
-- The instant the state no longer matters (at least now).
local function later()
  return math.max(horizon(tat, pause), now)
end
-- Give back n tokens of an admission that was not used. Exact while the bucket has not
-- refilled past it: tat moves back by n·T, never below now (a full bucket) and never before
-- a pause's restart. (No instant needed: the second argument is unused.)
local function give(n, _)
  if tat <= now then return end
  local to = tat - n * T
  if to < now then to = now end
  if pause > now and to < pause + tau - T then to = pause + tau - T end
  if to < tat then
    tat = to
    save(tat, pause)
  end
end
-- Hold every admission for d µs, then restart from an empty bucket whose first token is
-- due when the pause ends. Returns the end of the pause.
local function hold(d)
  if now + d > pause then pause = now + d end
  local floor = pause + tau - T
  if tat < floor then tat = floor end
  save(tat, pause)
  return pause
end
