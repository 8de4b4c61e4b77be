-- Windows (fixed, sliding, log): the operations every script names (`lua/acquire.lua`,
-- `lua/pause.lua`, `lua/release.lua`, `lua/stack/*.lua`), written once against the
-- functions every window `state.lua` defines (`parse`, `earliest`, `tail`, `admit`,
-- `horizon`, `save`, `restart_at`).
-- Read the state of `q`, re-read in this call's parameters; q.cap, the most tokens one
-- request takes, and q.ahead, how far ahead a waiter may book (HW).
local function load(q)
  parse(q)
  convert(q)
  q.cap, q.ahead = q.L, q.HW
end
-- The earliest instant at or after `from` at which n tokens fit: the window model's and the
-- ramp's after a pause, never before the end of a pause nor the last booking (`tail`).
local function fits(q, n, from)
  return ramp_earliest(q, earliest, n, math.max(q.base, tail(q), from))
end
-- Count n tokens admitted at `at` (at or after `fits`), booked when it lies ahead.
local function take(q, n, at)
  admit(q, n, at)
  ramp_commit(q, n, at)
  save(q)
end
-- The instant the state no longer matters.
local function later(q)
  return horizon(q)
end
-- Hold every admission for d µs, then restart on the ramp: one token when the pause ends,
-- then one per interval, until the window's bound takes over (`restart_at` forgets what
-- must not come back as a burst, and says when). Returns the end of the pause.
local function hold(q, d)
  if now + d > q.pause then
    q.pause = now + d
    ramp_start(q, q.pause, restart_at(q, q.pause))
  end
  save(q)
  return q.pause
end
