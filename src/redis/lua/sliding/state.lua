-- Sliding window (two-window estimate): the state, its clamp and its save, of a quota `q`.
-- The state is "S<w>:<prev>:<cur>" or "S<w>:<prev>:<cur>:<pause>", then the ramp's suffix
-- while it runs (`lua/window/ramp.lua`), then "Q<q>" while a booking lies ahead: `cur`
-- tokens admitted in the window of index w ([w·W, (w+1)·W) of the Redis clock), `prev` in
-- window w − 1; `pause` the end of a pause in force; `q` the latest instant booked that is
-- still ahead. Any other window holds nothing.
-- While bookings lie ahead, KEYS[2] (q.log) is a sorted set of them: score = the booked
-- instant, member = "<instant>:<tokens>:<now of the booking>[:<k>]" (unique), written with
-- the same TTL; a cancelled booking leaves it, and `q` becomes the latest one left, so the
-- turn it held goes to the next request. Entries that have passed are dropped at the next
-- booking.
-- Read the state into q.w, q.p (prev), q.c (cur), q.qb (the latest booking) and q.pause,
-- with q.cw the window of now, q.base the first instant anything can go, and q.dirty when
-- a clamp must be written.
local function parse(q)
  ramp_init(q)
  local W, L, booked = q.W, q.L, q.log
  local cw = math.floor(now / W)
  local w, p, c, pause, dirty = cw, 0, 0, 0, false
  local qb = 0
  local raw = q.raw
  if raw then
    local head, qa = string.match(raw, '^(.-)Q(%d+)$')
    if head then
      raw = head
      qb = tonumber(qa)
    end
    local a, b, d, e = string.match(ramp_read(q, raw), '^S(%d+):(%d+):(%d+):?(%d*)$')
    if a then
      w = tonumber(a)
      p = tonumber(b)
      c = tonumber(d)
      if e ~= '' then pause = tonumber(e) end
    else
      dirty = true -- not ours: count it as a fresh state, and overwrite it
      ramp_forget(q)
      qb = 0
      foreign(q)
    end
  end
  -- Clamp what no legitimate state can be: a pause ends within P, no window after the one
  -- the state reaches (`reach`: the booking horizon, or the end of the pause) holds
  -- tokens, no booking lies further ahead, the current window no more than L.
  if pause > now + P then pause = now + P; dirty = true end
  if pause <= now then pause = 0 end
  local far = reach(q, pause)
  local bw = math.floor(far / W)
  if w > bw then w = bw; dirty = true end
  if qb > far then
    -- The bookings move there too: one entry of no tokens (no release names it).
    qb = far
    dirty = true
    redis.call('DEL', booked)
    redis.call('ZADD', booked, fmt(qb), string.format('%d:0:%d', qb, now))
    redis.call('PEXPIRE', booked, fmt(ttl_ms(qb))) -- written even when the state is not
  end
  if qb <= now then qb = 0 end
  if qb > 0 then stray_set(q) end
  if ramp_clamp(q, pause) then dirty = true end
  if c > L then c = L; dirty = true end
  -- (The window before may hold more: a raise re-spreads what it carries over what is left
  -- of the current window, `respread`. It counts only while the current window lasts.)
  if p > L * W then p = L * W; dirty = true end
  -- Move the state to the window of now when it is older (nothing is lost that still
  -- counts).
  if w < cw then
    if w == cw - 1 then p = c else p = 0 end
    c = 0
    w = cw
  end
  q.cw, q.w, q.p, q.c, q.qb, q.pause, q.dirty = cw, w, p, c, qb, pause, dirty
  q.base = math.max(now, pause)
end
local function count(q, v)
  if v == q.w then return q.c end
  if v == q.w - 1 then return q.p end
  return 0
end
-- The state matters until the end of the window after w (where w still counts as the
-- previous window), of any pause and of the ramp.
local function horizon(q)
  return math.max((q.w + 2) * q.W, q.pause, q.ramp_until, q.qb)
end
local function save(q)
  local value = with_pause(string.format('S%d:%d:%d', q.w, q.p, q.c), q.pause)
  local suffix = ''
  if q.qb > now then suffix = string.format('Q%d', q.qb) end
  local h = horizon(q)
  put(q, value .. ramp_suffix(q) .. suffix, h)
  if q.qb > now then redis.call('PEXPIRE', q.log, fmt(ttl_ms(h))) end
end
-- A request goes no earlier than the last booking (its estimate counted every booking
-- before it, none after), nor before the start of the last window kept.
local function tail(q)
  local t = q.qb
  if q.w > q.cw and q.w * q.W > t then t = q.w * q.W end
  return t
end
-- Count n tokens admitted at `at` (in the window of `at`, never before w); its window.
local function admit(q, n, at)
  local v = math.floor(at / q.W)
  if v == q.w + 1 then
    q.p, q.c, q.w = q.c, 0, v
  elseif v > q.w + 1 then
    q.p, q.c, q.w = 0, 0, v
  end
  q.c = q.c + n
  if at > now then
    local booked = q.log
    -- Without a booking ahead, what the set holds has passed (or is no state of ours).
    if q.qb == 0 then
      redis.call('DEL', booked)
    else
      redis.call('ZREMRANGEBYSCORE', booked, '-inf', fmt(now))
    end
    local m = string.format('%d:%d:%d', at, n, now)
    local k = 0
    while redis.call('ZADD', booked, 'NX', fmt(at), m) == 0 do
      k = k + 1
      m = string.format('%d:%d:%d:%d', at, n, now, k)
    end
    if at > q.qb then q.qb = at end
  end
  return v
end
-- Cancel a booking of n tokens for the instant `at` still ahead: it leaves the set, and
-- `q` becomes the latest booking left (the turn goes to the next request). Whether `q`
-- moved.
local function unbook(q, at, n)
  if q.qb == 0 or at <= now then return false end
  local booked = q.log
  local members = redis.call('ZRANGEBYSCORE', booked, fmt(at), fmt(at))
  for i = 1, #members do
    if tonumber(string.match(members[i], '^%d+:(%d+):')) == n then
      redis.call('ZREM', booked, members[i])
      local last = redis.call('ZRANGE', booked, -1, -1, 'WITHSCORES')
      local latest = 0
      if #last > 0 then latest = tonumber(last[2]) end
      if latest <= now then latest = 0 end
      if latest < q.qb then
        q.qb = latest
        return true
      end
      return false
    end
  end
  return false
end
-- Give back n tokens admitted in window v, if it is one of the two kept, and the turn of
-- a booking for the instant `at` (when > 0) still ahead. Whether anything changed.
local function refund(q, v, n, at)
  local changed = false
  if at > 0 then changed = unbook(q, at, n) end
  if v == q.w and q.c > 0 then
    q.c = math.max(q.c - n, 0)
    return true
  elseif v == q.w - 1 and q.p > 0 then
    q.p = math.max(q.p - n, 0)
    return true
  end
  return changed
end
-- The earliest instant at or after `nb` at which n tokens fit: the estimate at t in window
-- v is ceil(count(v−1) · (end of v − t) / W) + count(v), and must stay ≤ max(E, n) − n (E
-- per window, or n alone when n > E: `lua/common.lua`).
local function earliest(q, n, nb)
  local W = q.W
  local v = math.floor(nb / W)
  local lim = math.max(q.E, n)
  while true do
    local cur = count(q, v)
    if cur + n <= lim then
      local t = math.max(nb, v * W)
      local left = lim - cur - n
      local prev = count(q, v - 1)
      local e = (v + 1) * W
      if math.ceil(prev * (e - t) / W) <= left then return t end
      -- The carried share falls linearly: it fits from e − floor(left · W / prev).
      t = math.max(e - math.floor(left * W / prev), t)
      if t < e then return t end
    end
    v = v + 1
  end
end
-- The tokens that fit at `t` (at least now, not before the last booking) under a limit of
-- `e` per window: `e` less the estimate at `t` (as `earliest` reads it), at least 0.
local function room(q, e, t)
  local W = q.W
  local v = math.floor(t / W)
  local carried = math.ceil(count(q, v - 1) * ((v + 1) * W - t) / W)
  return math.max(e - carried - count(q, v), 0)
end
-- Restart after a pause ending at `e`: nothing to forget (the ramp bounds what goes after
-- it). The ramp hands over a window after `e`, to the estimate.
local function restart_at(q, e)
  return e + q.W
end
-- A raise of the tokens per window that must add `extra` at `t` (`lua/window/convert.lua`),
-- as the in-process window does: what the estimate counts at `t` then (at most E) is split
-- as it was, the current window's own tokens staying in it, and the share carried from the
-- window before carried again, fading out by the end of the current window (folded into
-- the current window, it would count in full until its end, then be carried once more).
local function respread(q, extra, t)
  local W = q.W
  local v = math.floor(t / W)
  if v ~= q.w then admit(q, extra, t); return end
  local left = (v + 1) * W - t
  local used = math.min(math.ceil(q.p * left / W) + q.c + extra, q.E)
  local own = math.min(q.c, used)
  local carried = used - own
  q.c, q.p = own, 0
  if carried > 0 then
    if left > 0 and q.w > 0 then q.p = math.ceil(carried * W / left) else q.c = q.c + carried end
  end
end
