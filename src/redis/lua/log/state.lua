-- Sliding log (exact window): the state, its clamp and its save.
-- KEYS[1] holds "L<seq>" or "L<seq>:<pause>": the last entry's sequence number and the end
-- of a pause in force. KEYS[2] is a sorted set of the admissions still in the window: score
-- = the instant (µs, Redis clock), member = "<seq>:<tokens>" (unique). An entry at x counts
-- at t while x > t − W. Both keys are written together, with the same TTL.
-- Work per decision: O(entries in the window), at most L of them (each holds ≥ 1 token),
-- plus those a pause adds (at most 1024).
local log = KEYS[2]
local seq, pause, dirty = 0, 0, false
local ours = false
if raw then
  local a, b = string.match(raw, '^L(%d+):?(%d*)$')
  if a then
    ours = true
    seq = tonumber(a)
    if b ~= '' then pause = tonumber(b) end
  else
    dirty = true -- not ours: count it as a fresh state, and overwrite it
  end
end
-- Entries without our state are not ours either (or from a state that has just expired).
if not ours then redis.call('DEL', log) end
if pause > now + P then pause = now + P; dirty = true end
if pause <= now then pause = 0 end
local base = math.max(now, pause)
-- Forget what no longer counts.
redis.call('ZREMRANGEBYSCORE', log, '-inf', fmt(now - W))
-- Entries after `base` no legitimate state holds (a clock stepped back after a failover, a
-- stray write): they are moved to `base`, at most L tokens, and the clamp is written.
local late = redis.call('ZRANGEBYSCORE', log, '(' .. fmt(base), '+inf')
if #late > 0 then
  local tokens = 0
  for _, m in ipairs(late) do
    tokens = tokens + (tonumber(string.match(m, '^%d+:(%d+)$')) or 1)
  end
  redis.call('ZREMRANGEBYSCORE', log, '(' .. fmt(base), '+inf')
  seq = seq + 1
  redis.call('ZADD', log, fmt(base), string.format('%d:%d', seq, math.min(tokens, L)))
  dirty = true
end
-- The entries in time order: xs[i] the instant, ns[i] the tokens, ms[i] the member.
local xs, ns, ms = {}, {}, {}
local total = 0
local flat = redis.call('ZRANGE', log, 0, -1, 'WITHSCORES')
for i = 1, #flat, 2 do
  local k = #xs + 1
  ms[k] = flat[i]
  xs[k] = tonumber(flat[i + 1])
  local t = tonumber(string.match(flat[i], '^%d+:(%d+)$')) or 1
  if t < 1 then t = 1 end
  if t > L then t = L end
  ns[k] = t
  total = total + t
end
-- The state matters until its newest entry leaves the window, and any pause ends.
local function horizon()
  local h = pause
  if #xs > 0 and xs[#xs] + W > h then h = xs[#xs] + W end
  if h <= now then h = now + 1 end
  return h
end
local function save()
  local value
  if pause > now then
    value = string.format('L%d:%d', seq, pause)
  else
    value = string.format('L%d', seq)
  end
  local h = horizon()
  put(value, h)
  if #xs > 0 then redis.call('PEXPIRE', log, fmt(ttl_ms(h))) end
end
local function add(at, tokens)
  seq = seq + 1
  local m = string.format('%d:%d', seq, tokens)
  redis.call('ZADD', log, fmt(at), m)
  -- Keep the lists in time order (entries are added at the end of the window's time).
  local k = #xs + 1
  while k > 1 and xs[k - 1] > at do
    xs[k], ns[k], ms[k] = xs[k - 1], ns[k - 1], ms[k - 1]
    k = k - 1
  end
  xs[k], ns[k], ms[k] = at, tokens, m
  total = total + tokens
end
-- The earliest instant at or after `nb` at which n tokens fit: drop the oldest entries until
-- the rest fit; the last one dropped stops counting at its instant + W.
local function earliest(n, nb)
  local left = total + n
  local t = nb
  for i = 1, #xs do
    local expired = xs[i] + W <= nb
    if not expired and left <= L then break end
    left = left - ns[i]
    if not expired then t = math.max(t, xs[i] + W) end
  end
  return t
end
-- Restart after a pause ending at `e` as from an empty bucket refilling at L/W: one token
-- fits at `e`, the others come back one per W/L. Tokens logged before that still count at
-- `e` take the places of the first ones to come back. At most 1024 entries: beyond, each
-- entry holds several tokens and comes back at the instant of its last one.
local function restart_at(e)
  local step = math.max(math.floor(W / L), 1)
  local first = e + step - W
  local chunk = math.max(math.ceil((L - 1) / 1024), 1)
  local k = 0
  for i = 1, #xs do
    if xs[i] > e - W then k = k + ns[i] end
  end
  while k < L - 1 do
    local tokens = math.min(chunk, L - 1 - k)
    add(first + (k + tokens - 1) * step, tokens)
    k = k + tokens
  end
end
