-- tower-throttle: the part both scripts share (arguments, Redis clock, state, clamp, save).
-- KEYS[1] = the bucket's key, a string "<tat>" or "<tat>:<pause>" (µs, Redis clock).
-- ARGV[1] = T, emission interval, µs (>= 1)      ARGV[2] = B, burst (>= 1)
-- ARGV[3] = the operation's argument            ARGV[4] = P, the longest pause, µs
-- Integers only, all below 2^53 (exact in Lua's doubles).
local T = tonumber(ARGV[1])
local B = tonumber(ARGV[2])
local x = tonumber(ARGV[3])
local P = tonumber(ARGV[4])
if not (T and B and x and P) or T < 1 or B < 1 or x < 0 or P < 0 then
  return redis.error_reply('ERR tower-throttle: bad arguments')
end
local tau = B * T -- how far tat may lie ahead of now for a token to still fit
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])
local key = KEYS[1]
local raw = redis.call('GET', key)
local tat, pause, dirty = now, 0, false
if raw then
  local a, b = string.match(raw, '^(%d+)(:?%d*)$')
  if a and (b == '' or #b > 1) then
    tat = tonumber(a)
    if b ~= '' then pause = tonumber(string.sub(b, 2)) end
  else
    dirty = true -- not ours: count it as a full bucket, and overwrite it
  end
end
-- Clamp what no legitimate state can be (a clock stepped back after a failover, a stray
-- write): a pause ends within P, a bucket is full again within tau of max(now, pause).
-- A clamp is written back, even when the request is refused, so it cannot recur.
if pause > now + P then pause = now + P; dirty = true end
local base = now
if pause > now then base = pause end
if tat > base + tau then tat = base + tau; dirty = true end
-- While paused, the first token is due when the pause ends.
if pause > now and tat < pause + tau - T then tat = pause + tau - T; dirty = true end
if tat < now then tat = now end
-- Every write carries its TTL: the time until the state ends, in whole ms, rounded up.
local function save(t, p)
  local horizon = t
  local value
  if p > now then
    value = string.format('%d:%d', t, p)
    if p > horizon then horizon = p end
  else
    value = string.format('%d', t)
  end
  local ms = math.ceil((horizon - now) / 1000)
  if ms < 1 then ms = 1 end
  redis.call('SET', key, value, 'PX', string.format('%d', ms))
end
