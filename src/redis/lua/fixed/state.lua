-- Fixed window: the state, its clamp and its save.
-- KEYS[1] holds "F<w>:<count>" or "F<w>:<count>:<pause>": `count` tokens admitted in the
-- window of index w (the window [w·W, (w+1)·W) of the Redis clock, so aligned to the UNIX
-- epoch); `pause` the end of a pause in force. Any other window holds nothing.
local cw = math.floor(now / W)
local w, c, pause, dirty = cw, 0, 0, false
if raw then
  local a, b, p = string.match(raw, '^F(%d+):(%d+):?(%d*)$')
  if a then
    w = tonumber(a)
    c = tonumber(b)
    if p ~= '' then pause = tonumber(p) end
  else
    dirty = true -- not ours: count it as a fresh state, and overwrite it
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
if c > L then c = L; dirty = true end
if w < cw then w = cw; c = 0 end -- a past window: nothing left
local function count(v)
  if v == w then return c end
  return 0
end
-- The state matters until the end of its window and of any pause.
local function horizon()
  return math.max((w + 1) * W, pause)
end
local function save()
  local value
  if pause > now then
    value = string.format('F%d:%d:%d', w, c, pause)
  else
    value = string.format('F%d:%d', w, c)
  end
  put(value, horizon())
end
-- The earliest instant at or after `nb` at which n tokens fit.
local function earliest(n, nb)
  local v = math.floor(nb / W)
  if count(v) + n <= L then return nb end
  return (v + 1) * W
end
-- Restart after a pause ending at `e` as from an empty bucket: fill the window of `e` so
-- that only the share of the window left at `e` remains (at least 1 token).
local function restart_at(e)
  local ew = math.floor(e / W)
  local left = (ew + 1) * W - e
  local cap = math.floor(L * left / W)
  if cap < 1 then cap = 1 end
  if cap > L then cap = L end
  local fill = L - cap
  if w == ew then
    if c < fill then c = fill end
  elseif w < ew then
    w = ew
    c = fill
  end
end
