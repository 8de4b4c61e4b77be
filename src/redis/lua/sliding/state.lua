-- Sliding window (two-window estimate): the state, its clamp and its save.
-- KEYS[1] holds "S<w>:<prev>:<cur>" or "S<w>:<prev>:<cur>:<pause>", then the ramp's suffix
-- while it runs (`lua/window/ramp.lua`): `cur` tokens admitted
-- in the window of index w ([w·W, (w+1)·W) of the Redis clock), `prev` in window w − 1;
-- `pause` the end of a pause in force. Any other window holds nothing.
local cw = math.floor(now / W)
local w, p, c, pause, dirty = cw, 0, 0, 0, false
if raw then
  local a, b, d, e = string.match(ramp_read(raw), '^S(%d+):(%d+):(%d+):?(%d*)$')
  if a then
    w = tonumber(a)
    p = tonumber(b)
    c = tonumber(d)
    if e ~= '' then pause = tonumber(e) end
  else
    dirty = true -- not ours: count it as a fresh state, and overwrite it
    ramp_forget()
    foreign()
  end
end
-- Clamp what no legitimate state can be: a pause ends within P, no window after the one
-- where the pause ends (or of now) holds tokens, no window more than L.
if pause > now + P then pause = now + P; dirty = true end
if pause <= now then pause = 0 end
local base = math.max(now, pause)
local bw = math.floor(base / W)
if w > bw then w = bw; dirty = true end
if ramp_clamp(base) then dirty = true end
if c > L then c = L; dirty = true end
if p > L then p = L; dirty = true end
-- Move the state to the window of now when it is older (nothing is lost that still counts).
if w < cw then
  if w == cw - 1 then p = c else p = 0 end
  c = 0
  w = cw
end
local function count(v)
  if v == w then return c end
  if v == w - 1 then return p end
  return 0
end
-- The state matters until the end of the window after w (where w still counts as the
-- previous window), of any pause and of the ramp.
local function horizon()
  return math.max((w + 2) * W, pause, ramp_until)
end
local function save()
  local value
  if pause > now then
    value = string.format('S%d:%d:%d:%d', w, p, c, pause)
  else
    value = string.format('S%d:%d:%d', w, p, c)
  end
  put(value .. ramp_suffix(), horizon())
end
-- The earliest instant at or after `nb` at which n tokens fit: the estimate at t in window
-- v is ceil(count(v−1) · (end of v − t) / W) + count(v), and must stay ≤ L − n.
local function earliest(n, nb)
  local v = math.floor(nb / W)
  while true do
    local cur = count(v)
    if cur + n <= L then
      local t = math.max(nb, v * W)
      local room = L - cur - n
      local prev = count(v - 1)
      local e = (v + 1) * W
      if math.ceil(prev * (e - t) / W) <= room then return t end
      -- The carried share falls linearly: it fits from e − floor(room · W / prev).
      t = math.max(e - math.floor(room * W / prev), t)
      if t < e then return t end
    end
    v = v + 1
  end
end
-- Restart after a pause ending at `e`: nothing to forget (the ramp bounds what goes after
-- it). The ramp hands over a window after `e`, to the estimate.
local function restart_at(e)
  return e + W
end
