-- Sliding log (exact window): the state, its clamp and its save.
-- KEYS[1] holds "L<seq>:<total>" or "L<seq>:<total>:<pause>", then the ramp's suffix while
-- it runs (`lua/window/ramp.lua`): the last entry's sequence number, the tokens of the
-- entries in the log, and the end of a pause in force. KEYS[2] is
-- a sorted set of the admissions still in the window: score = the instant (µs, Redis
-- clock), member = "<seq>:<tokens>" (unique). An entry at x counts at t while x > t − W.
-- Both keys are written together, with the same TTL.
-- Work per decision: an admission or a refusal costs O(log N) plus the entries that left
-- the window since the last decision (each leaves once) and those it must wait for
-- (`earliest`); a release reads the entries in the window, O(N); a pause is O(1). N: the entries of the last W µs (at most L,
-- an entry holds ≥ 1 token) and those booked ahead (within HW).
local log = KEYS[2]
local seq, total, pause, dirty = 0, 0, 0, false
local ours = false
if raw then
  local a, b, c = string.match(ramp_read(raw), '^L(%d+):(%d+):?(%d*)$')
  if a then
    ours = true
    seq = tonumber(a)
    total = tonumber(b)
    if c ~= '' then pause = tonumber(c) end
  else
    dirty = true -- not ours: count it as a fresh state, and overwrite it
    ramp_forget()
  end
end
-- Entries without our state are not ours either (or from a state that has just expired).
if not ours then redis.call('DEL', log) else stray_set() end
if pause > now + P then pause = now + P; dirty = true end
if pause <= now then pause = 0 end
local base = math.max(now, pause)
if ramp_clamp(pause) then dirty = true end
local function tokens_of(m)
  local t = tonumber(string.match(m, '^%d+:(%d+)$')) or 1
  if t < 1 then t = 1 end
  if t > L then t = L end
  return t
end
local function sum(members)
  local s = 0
  for i = 1, #members do s = s + tokens_of(members[i]) end
  return s
end
-- Forget what no longer counts: each entry leaves once.
local cut = fmt(now - W)
local gone = redis.call('ZRANGEBYSCORE', log, '-inf', cut)
if #gone > 0 then
  total = total - sum(gone)
  redis.call('ZREMRANGEBYSCORE', log, '-inf', cut)
  dirty = true -- the total must follow the entries, on a refusal too
end
-- Entries after the instant the state reaches (`reach`: bookings lie at most HW ahead, a
-- change of quota charges the end of a pause) no legitimate state holds (a clock stepped
-- back after a failover, a stray write): they are moved there, at most L tokens, and the
-- clamp is written.
local far = reach(pause)
local late = redis.call('ZRANGEBYSCORE', log, '(' .. fmt(far), '+inf')
if #late > 0 then
  local t = sum(late)
  redis.call('ZREMRANGEBYSCORE', log, '(' .. fmt(far), '+inf')
  total = total - t
  t = math.min(t, L)
  seq = seq + 1
  redis.call('ZADD', log, fmt(far), string.format('%d:%d', seq, t))
  total = total + t
  dirty = true
end
local newest = nil
local function find_newest()
  local last = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
  if #last > 0 then newest = tonumber(last[2]) else newest = nil end
end
find_newest()
-- The running total must agree with the log: nothing without entries, something with them,
-- never more than a log can legitimately hold. Only a stray write to either key makes them
-- disagree: then count the entries.
if newest == nil then
  if total ~= 0 then total = 0; dirty = true end
elseif total < 1 or total > 2 * L + 1024 then
  total = sum(redis.call('ZRANGE', log, 0, -1))
  dirty = true
end
-- The state matters until its newest entry leaves the window, any pause ends and the ramp
-- hands over.
local function horizon()
  local h = math.max(pause, ramp_until)
  if newest and newest + W > h then h = newest + W end
  if h <= now then h = now + 1 end
  return h
end
local function save()
  local value
  if pause > now then
    value = string.format('L%d:%d:%d', seq, total, pause)
  else
    value = string.format('L%d:%d', seq, total)
  end
  local h = horizon()
  put(value .. ramp_suffix(), h)
  if newest then redis.call('PEXPIRE', log, fmt(ttl_ms(h))) end
end
local function add(at, tokens)
  seq = seq + 1
  redis.call('ZADD', log, fmt(at), string.format('%d:%d', seq, tokens))
  total = total + tokens
  if newest == nil or at > newest then newest = at end
end
-- The earliest instant at or after `nb` at which n tokens fit (at most E in the last W µs,
-- or n alone when n > E: `lua/common.lua`): drop the oldest entries until the rest fit; the
-- last one dropped stops counting at its instant + W. The oldest entries are read in
-- batches, first as many as tokens must leave, then twice as many each time: the work
-- follows the entries dropped, O(log N + dropped), never the whole log.
local function earliest(n, nb)
  local lim = math.max(E, n)
  local left = total + n
  if left <= lim then return nb end
  local t = nb
  local from, k = 0, left - lim + 1
  while true do
    local flat = redis.call('ZRANGE', log, from, from + k - 1, 'WITHSCORES')
    for i = 1, #flat, 2 do
      local at = tonumber(flat[i + 1])
      local expired = at + W <= nb
      if not expired and left <= lim then return t end
      left = left - tokens_of(flat[i])
      if not expired then t = math.max(t, at + W) end
    end
    if #flat < 2 * k then return t end
    from = from + k
    k = 2 * k
  end
end
-- A request goes no earlier than the newest entry (booked instants included): first come,
-- first served.
local function tail()
  return newest or 0
end
-- The tokens that fit at `t` (at least now, not before the newest entry) under a limit of
-- `e` in the last W µs: `e` less the entries after t − W.
local function room(e, t)
  local live = total
  if t > now then live = sum(redis.call('ZRANGEBYSCORE', log, '(' .. fmt(t - W), '+inf')) end
  return math.max(e - live, 0)
end
-- Count n tokens admitted at `at`, as the other windows name it.
local function admit(n, at)
  add(at, n)
end
-- Restart after a pause ending at `e`: the log keeps its entries, which count until they
-- leave the window (at most L in any W µs, across the pause too); the ramp spaces what goes
-- as they leave, and hands over a window after `e`.
local function restart_at(e)
  return e + W
end
-- A raise of the tokens per window that must add `extra` at `t` (`lua/window/convert.lua`).
local function respread(extra, t)
  admit(extra, t)
end
