-- Sliding log (exact window): the state, its clamp and its save, of a quota `q`.
-- The state is "L<seq>:<total>" or "L<seq>:<total>:<pause>", then the ramp's suffix while
-- it runs (`lua/window/ramp.lua`): the last entry's sequence number, the tokens of the
-- entries in the log, and the end of a pause in force. KEYS[2] (q.log) is a sorted set of
-- the admissions still in the window: score = the instant (µs, Redis clock), member =
-- "<seq>:<tokens>" (unique). An entry at x counts at t while x > t − W. Both keys are
-- written together, with the same TTL.
-- Work per decision: an admission or a refusal costs O(log N) plus the entries that left
-- the window since the last decision (each leaves once) and those it must wait for
-- (`earliest`); a release reads the entries in the window, O(N); a pause is O(1). N: the
-- entries of the last W µs (at most L, an entry holds ≥ 1 token) and those booked ahead
-- (within HW).
local function tokens_of(q, m)
  local t = tonumber(string.match(m, '^%d+:(%d+)$')) or 1
  if t < 1 then t = 1 end
  if t > q.L then t = q.L end
  return t
end
local function sum(q, members)
  local s = 0
  for i = 1, #members do s = s + tokens_of(q, members[i]) end
  return s
end
local function find_newest(q)
  local last = redis.call('ZRANGE', q.log, -1, -1, 'WITHSCORES')
  if #last > 0 then q.newest = tonumber(last[2]) else q.newest = nil end
end
-- Read the state into q.seq, q.total, q.newest (the newest entry's instant, or nil) and
-- q.pause, with q.base the first instant anything can go, and q.dirty when a clamp must be
-- written.
local function parse(q)
  ramp_init(q)
  local log, W, L = q.log, q.W, q.L
  local seq, total, pause, dirty = 0, 0, 0, false
  local ours = false
  if q.raw then
    local a, b, c = string.match(ramp_read(q, q.raw), '^L(%d+):(%d+):?(%d*)$')
    if a then
      ours = true
      seq = tonumber(a)
      total = tonumber(b)
      if c ~= '' then pause = tonumber(c) end
    else
      dirty = true -- not ours: count it as a fresh state, and overwrite it
      ramp_forget(q)
    end
  end
  -- Entries without our state are not ours either (or from a state that has just expired).
  if not ours then redis.call('DEL', log) else stray_set(q) end
  if pause > now + P then pause = now + P; dirty = true end
  if pause <= now then pause = 0 end
  if ramp_clamp(q, pause) then dirty = true end
  -- Forget what no longer counts: each entry leaves once.
  local cut = fmt(now - W)
  local gone = redis.call('ZRANGEBYSCORE', log, '-inf', cut)
  if #gone > 0 then
    total = total - sum(q, gone)
    redis.call('ZREMRANGEBYSCORE', log, '-inf', cut)
    dirty = true -- the total must follow the entries, on a refusal too
  end
  -- Entries after the instant the state reaches (`reach`: bookings lie at most HW ahead, a
  -- change of quota charges the end of a pause) no legitimate state holds (a clock stepped
  -- back after a failover, a stray write): they are moved there, at most L tokens, and the
  -- clamp is written.
  local far = reach(q, pause)
  local late = redis.call('ZRANGEBYSCORE', log, '(' .. fmt(far), '+inf')
  if #late > 0 then
    local t = sum(q, late)
    redis.call('ZREMRANGEBYSCORE', log, '(' .. fmt(far), '+inf')
    total = total - t
    t = math.min(t, L)
    seq = seq + 1
    redis.call('ZADD', log, fmt(far), string.format('%d:%d', seq, t))
    total = total + t
    dirty = true
  end
  find_newest(q)
  -- The running total must agree with the log: nothing without entries, something with
  -- them, never more than a log can legitimately hold. Only a stray write to either key
  -- makes them disagree: then count the entries.
  if q.newest == nil then
    if total ~= 0 then total = 0; dirty = true end
  elseif total < 1 or total > 2 * L + 1024 then
    total = sum(q, redis.call('ZRANGE', log, 0, -1))
    dirty = true
  end
  q.seq, q.total, q.pause, q.dirty = seq, total, pause, dirty
  q.base = math.max(now, pause)
end
-- The state matters until its newest entry leaves the window, any pause ends and the ramp
-- hands over.
local function horizon(q)
  local h = math.max(q.pause, q.ramp_until)
  if q.newest and q.newest + q.W > h then h = q.newest + q.W end
  if h <= now then h = now + 1 end
  return h
end
local function save(q)
  local value = with_pause(string.format('L%d:%d', q.seq, q.total), q.pause)
  local h = horizon(q)
  put(q, value .. ramp_suffix(q), h)
  if q.newest then redis.call('PEXPIRE', q.log, fmt(ttl_ms(h))) end
end
-- The earliest instant at or after `nb` at which n tokens fit (at most E in the last W µs,
-- or n alone when n > E: `lua/common.lua`): drop the oldest entries until the rest fit; the
-- last one dropped stops counting at its instant + W. The oldest entries are read in
-- batches, first as many as tokens must leave, then twice as many each time: the work
-- follows the entries dropped, O(log N + dropped), never the whole log.
local function earliest(q, n, nb)
  local lim = math.max(q.E, n)
  local left = q.total + n
  if left <= lim then return nb end
  local W = q.W
  local t = nb
  local from, k = 0, left - lim + 1
  while true do
    local flat = redis.call('ZRANGE', q.log, from, from + k - 1, 'WITHSCORES')
    for i = 1, #flat, 2 do
      local at = tonumber(flat[i + 1])
      local expired = at + W <= nb
      if not expired and left <= lim then return t end
      left = left - tokens_of(q, flat[i])
      if not expired then t = math.max(t, at + W) end
    end
    if #flat < 2 * k then return t end
    from = from + k
    k = 2 * k
  end
end
-- A request goes no earlier than the newest entry (booked instants included): first come,
-- first served.
local function tail(q)
  return q.newest or 0
end
-- The tokens that fit at `t` (at least now, not before the newest entry) under a limit of
-- `e` in the last W µs: `e` less the entries after t − W.
local function room(q, e, t)
  local live = q.total
  if t > now then
    live = sum(q, redis.call('ZRANGEBYSCORE', q.log, '(' .. fmt(t - q.W), '+inf'))
  end
  return math.max(e - live, 0)
end
-- Count n tokens admitted at `at`: an entry.
local function admit(q, n, at)
  q.seq = q.seq + 1
  redis.call('ZADD', q.log, fmt(at), string.format('%d:%d', q.seq, n))
  q.total = q.total + n
  if q.newest == nil or at > q.newest then q.newest = at end
end
-- Restart after a pause ending at `e`: the log keeps its entries, which count until they
-- leave the window (at most L in any W µs, across the pause too); the ramp spaces what goes
-- as they leave, and hands over a window after `e`.
local function restart_at(q, e)
  return e + q.W
end
-- A raise of the tokens per window that must add `extra` at `t` (`lua/window/convert.lua`).
local function respread(q, extra, t)
  admit(q, extra, t)
end
