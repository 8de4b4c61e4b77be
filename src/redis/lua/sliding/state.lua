-- Sliding window (two-window estimate): the state, its clamp and its save.
-- KEYS[1] holds "S<w>:<prev>:<cur>" or "S<w>:<prev>:<cur>:<pause>", then the ramp's suffix
-- while it runs (`lua/window/ramp.lua`), then "Q<q>" while a booking lies ahead: `cur`
-- tokens admitted in the window of index w ([w·W, (w+1)·W) of the Redis clock), `prev` in
-- window w − 1; `pause` the end of a pause in force; `q` the instant booked last. Any other
-- window holds nothing.
local cw = math.floor(now / W)
local w, p, c, pause, dirty = cw, 0, 0, 0, false
local q = 0
if raw then
  local head, qa = string.match(raw, '^(.-)Q(%d+)$')
  if head then
    raw = head
    q = tonumber(qa)
  end
  local a, b, d, e = string.match(ramp_read(raw), '^S(%d+):(%d+):(%d+):?(%d*)$')
  if a then
    w = tonumber(a)
    p = tonumber(b)
    c = tonumber(d)
    if e ~= '' then pause = tonumber(e) end
  else
    dirty = true -- not ours: count it as a fresh state, and overwrite it
    ramp_forget()
    q = 0
    foreign()
  end
end
-- Clamp what no legitimate state can be: a pause ends within P, no window after the one
-- of the booking horizon past the pause (or now) holds tokens, no booking lies further
-- ahead, no window more than L.
if pause > now + P then pause = now + P; dirty = true end
if pause <= now then pause = 0 end
local base = math.max(now, pause)
local bw = math.floor((base + HW) / W)
if w > bw then w = bw; dirty = true end
if q > base + HW then q = base + HW; dirty = true end
if q <= now then q = 0 end
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
  return math.max((w + 2) * W, pause, ramp_until, q)
end
local function save()
  local value
  if pause > now then
    value = string.format('S%d:%d:%d:%d', w, p, c, pause)
  else
    value = string.format('S%d:%d:%d', w, p, c)
  end
  local booked = ''
  if q > now then booked = string.format('Q%d', q) end
  put(value .. ramp_suffix() .. booked, horizon())
end
-- A request goes no earlier than the last booking (its estimate counted every booking
-- before it, none after), nor before the start of the last window kept.
local function tail()
  local t = q
  if w > cw and w * W > t then t = w * W end
  return t
end
-- Count n tokens admitted at `at` (in the window of `at`, never before w); its window.
local function admit(n, at)
  local v = math.floor(at / W)
  if v == w + 1 then
    p, c, w = c, 0, v
  elseif v > w + 1 then
    p, c, w = 0, 0, v
  end
  c = c + n
  if at > now and at > q then q = at end
  return v
end
-- Give back n tokens admitted in window v, if it is one of the two kept. Whether anything
-- changed. The last booking's instant stays: later requests still go after it.
local function refund(v, n)
  if v == w and c > 0 then
    c = math.max(c - n, 0)
    return true
  elseif v == w - 1 and p > 0 then
    p = math.max(p - n, 0)
    return true
  end
  return false
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
