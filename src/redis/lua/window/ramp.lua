-- The ramp a window restarts on after a pause (fixed, sliding, log): one token when the
-- pause ends, then one per interval T, as from an empty token bucket of burst 1, until the
-- window's own bound takes over. Stored while it runs as a suffix "R<tat>:<until>" of the
-- window's value: q.ramp_tat the instant the ramp lets the next request through (GCRA,
-- tolerance T), q.ramp_until the instant it hands over (each window's `restart_at` says
-- when).
-- No ramp yet; and the booking horizon of the windows: a waiter (acquire with `book`)
-- whose tokens fit within q.HW = max(1 s, W) is admitted now for that instant, counted at
-- once in the window of that instant, so later requests of any process line up behind it.
local function ramp_init(q)
  q.ramp_tat, q.ramp_until = 0, 0
  q.HW = math.max(1000000, q.W)
end
-- The window's own part of a stored value; the ramp, if any, is read off its end.
local function ramp_read(q, v)
  local head, a, b = string.match(v, '^(.-)R(%d+):(%d+)$')
  if not head then return v end
  q.ramp_tat, q.ramp_until = tonumber(a), tonumber(b)
  return head
end
-- No ramp (a value of another algorithm, or a ramp that has handed over).
local function ramp_forget(q)
  q.ramp_tat, q.ramp_until = 0, 0
end
-- The furthest instant a window's state legitimately reaches, `pause` being the end of a
-- pause in force (at most P ahead; 0: none): a booking lies at most HW ahead of now, and
-- a change of quota charges the end of the pause (`lua/window/convert.lua`).
local function reach(q, pause)
  return math.max(now + q.HW, pause)
end
-- Clamp what no legitimate ramp holds, `pause` as for `reach`: it hands over at most two
-- windows after its pause ends, and lets its next request through when the pause ends or
-- at most L·T after the last one it let through (booked at most HW ahead). Whether a
-- clamp must be written.
local function ramp_clamp(q, pause)
  if q.ramp_until <= now then ramp_forget(q); return false end
  local dirty = false
  local hands_over = math.max(now, pause) + 2 * q.W
  if q.ramp_until > hands_over then q.ramp_until = hands_over; dirty = true end
  local next = math.max(pause, now + q.HW + q.L * q.T)
  if q.ramp_tat > next then q.ramp_tat = next; dirty = true end
  return dirty
end
-- Start a ramp at the end `e` of a pause, handing over at `h`.
local function ramp_start(q, e, h)
  q.ramp_tat, q.ramp_until = e, h
end
-- The earliest instant >= `nb` at which the window model (`earliest`) and the ramp let
-- n tokens through: while the ramp runs, not before its `tat`; from `until` on, the
-- window's bound alone.
local function ramp_earliest(q, earliest, n, nb)
  local at = earliest(q, n, nb)
  if at < q.ramp_until then
    at = earliest(q, n, math.min(math.max(q.ramp_tat, at), q.ramp_until))
  end
  return at
end
-- Count n tokens admitted at `at`.
local function ramp_commit(q, n, at)
  if q.ramp_until > 0 then q.ramp_tat = math.max(q.ramp_tat, at) + n * q.T end
end
-- The suffix to store: the ramp while it runs.
local function ramp_suffix(q)
  if q.ramp_until > now then return string.format('R%d:%d', q.ramp_tat, q.ramp_until) end
  return ''
end
