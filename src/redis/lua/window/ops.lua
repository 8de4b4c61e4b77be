-- Windows (fixed, sliding, log): the operations every script names (`lua/acquire.lua`,
-- `lua/pause.lua`, `lua/release.lua`, `lua/stack/*.lua`), written once against the
-- functions every window `state.lua` defines (`earliest`, `tail`, `admit`, `horizon`,
-- `save`, `restart_at`).
-- The most tokens one request takes, and how far ahead a waiter may book (HW).
local CAP, AHEAD = L, HW
-- The earliest instant at or after `from` at which n tokens fit: the window model's and the
-- ramp's after a pause, never before the end of a pause nor the last booking (`tail`).
local function fits(n, from)
  return ramp_earliest(earliest, n, math.max(base, tail(), from))
end
-- Count n tokens admitted at `at` (at or after `fits`), booked when it lies ahead.
local function take(n, at)
  admit(n, at)
  ramp_commit(n, at)
  save()
end
-- The instant the state no longer matters.
local function later()
  return horizon()
end
-- Hold every admission for d µs, then restart on the ramp: one token when the pause ends,
-- then one per interval, until the window's bound takes over (`restart_at` forgets what
-- must not come back as a burst, and says when). Returns the end of the pause.
local function hold(d)
  if now + d > pause then
    pause = now + d
    ramp_start(pause, restart_at(pause))
  end
  save()
  return pause
end
