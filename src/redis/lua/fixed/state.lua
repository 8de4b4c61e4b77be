-- Fixed window: the state, its clamp and its save, of a quota `q`.
-- The state is "F<w>:<count>" or "F<w>:<count>:<pause>", then the ramp's suffix while it
-- runs (`lua/window/ramp.lua`): `count` tokens admitted in the window of index w (the
-- window [w·W, (w+1)·W) of the Redis clock, so aligned to the UNIX epoch); `pause` the end
-- of a pause in force. Any other window holds nothing.
-- Read the state into q.w, q.c (its count) and q.pause, with q.cw the window of now, q.base
-- the first instant anything can go, and q.dirty when a clamp must be written.
local function parse(q)
  ramp_init(q)
  local W, L = q.W, q.L
  local cw = math.floor(now / W)
  local w, c, pause, dirty = cw, 0, 0, false
  if q.raw then
    local a, b, p = string.match(ramp_read(q, q.raw), '^F(%d+):(%d+):?(%d*)$')
    if a then
      w = tonumber(a)
      c = tonumber(b)
      if p ~= '' then pause = tonumber(p) end
    else
      dirty = true -- not ours: count it as a fresh state, and overwrite it
      ramp_forget(q)
      foreign(q)
    end
  end
  -- Clamp what no legitimate state can be: a pause ends within P, no window after the one
  -- the state reaches (`reach`: the booking horizon, or the end of the pause) holds
  -- tokens, no window more than L.
  if pause > now + P then pause = now + P; dirty = true end
  if pause <= now then pause = 0 end
  local bw = math.floor(reach(q, pause) / W)
  if w > bw then w = bw; dirty = true end
  if ramp_clamp(q, pause) then dirty = true end
  if c > L then c = L; dirty = true end
  if w < cw then w = cw; c = 0 end -- a past window: nothing left
  q.cw, q.w, q.c, q.pause, q.dirty = cw, w, c, pause, dirty
  q.base = math.max(now, pause)
end
local function count(q, v)
  if v == q.w then return q.c end
  return 0
end
-- The state matters until the end of its window, of any pause and of the ramp.
local function horizon(q)
  return math.max((q.w + 1) * q.W, q.pause, q.ramp_until)
end
local function save(q)
  local value = with_pause(string.format('F%d:%d', q.w, q.c), q.pause)
  put(q, value .. ramp_suffix(q), horizon(q))
end
-- Only the last window with tokens is kept: a request goes no earlier than its start (the
-- windows before it, when it lies ahead, were full when it was booked).
local function tail(q)
  if q.w > q.cw then return q.w * q.W end
  return 0
end
-- Count n tokens admitted at `at` (in the window of `at`, never before w); its window.
local function admit(q, n, at)
  local v = math.floor(at / q.W)
  if v > q.w then q.w = v; q.c = 0 end
  q.c = q.c + n
  return v
end
-- Give back n tokens admitted in window v, if it is the one kept. Whether anything changed.
-- (The instant of a booking, fourth, matters not: every booking of a window goes at its
-- start, or at once.)
local function refund(q, v, n, _)
  if v == q.w and q.c > 0 then
    q.c = math.max(q.c - n, 0)
    return true
  end
  return false
end
-- The earliest instant at or after `nb` at which n tokens fit: at most E per window, or n
-- alone in a window when n > E (`lua/common.lua`).
local function earliest(q, n, nb)
  local v = math.floor(nb / q.W)
  if count(q, v) + n <= math.max(q.E, n) then return nb end
  return (v + 1) * q.W
end
-- The tokens that fit at `t` (at least now, not before the last booking) under a limit of
-- `e` per window: what a request of at most `e` finds (`lua/window/convert.lua`).
local function room(q, e, t)
  return math.max(e - count(q, math.floor(t / q.W)), 0)
end
-- Restart after a pause ending at `e`: nothing to forget (the ramp bounds what goes after
-- it). The ramp hands over at the first window boundary a whole window after `e`, so the
-- rest of a window never goes at once.
local function restart_at(q, e)
  local W = q.W
  return (math.floor((e + W - 1) / W) + 1) * W
end
-- A raise of the tokens per window that must add `extra` at `t` (`lua/window/convert.lua`).
local function respread(q, extra, t)
  admit(q, extra, t)
end
