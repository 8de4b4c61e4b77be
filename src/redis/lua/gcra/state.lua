-- Token and leaky bucket (GCRA): the state, its clamp and its save.
-- KEYS[1] holds "<TAG><tat>" or "<TAG><tat>:<pause>" (µs, Redis clock): TAG is '' for the
-- token bucket, 'K' for the leaky bucket. `tat` is the instant the bucket is full again;
-- `pause` the end of a pause in force. tau = B·T (token bucket) or T (leaky bucket).
local tat, pause, dirty = 0, 0, false -- no state: a bucket full for ever
if raw then
  local a, b = string.match(raw, '^' .. TAG .. '(%d+)(:?%d*)$')
  if a and (b == '' or #b > 1) then
    tat = tonumber(a)
    if b ~= '' then pause = tonumber(string.sub(b, 2)) end
  else
    dirty = true -- not ours: count it as a full bucket, and overwrite it
    foreign()
  end
end
-- The booking horizon H: a waiter may book an instant up to H ahead (acquire with `book`),
-- so a bucket is legitimately full again up to tau + H after max(now, pause).
local H = math.max(1000000, tau)
-- Clamp what no legitimate state can be (a clock stepped back after a failover, a stray
-- write): a pause ends within P, a bucket is full again within max(tau, B·T) + H of
-- max(now, pause) (an admission of n <= B tokens at or before now leaves tat at most
-- max(tau, n·T) after it: for the leaky bucket, tau = T is less than a weighted cost; and
-- a booking lies at most H ahead).
-- A clamp is written back, even when the request is refused, so it cannot recur.
if pause > now + P then pause = now + P; dirty = true end
local base = now
if pause > now then base = pause end
local span = math.max(tau, B * T) + H
if tat > base + span then tat = base + span; dirty = true end
-- While paused, the first token is due when the pause ends.
if pause > now and tat < pause + tau - T then tat = pause + tau - T; dirty = true end
-- A tat in the past is a full bucket.
local function full_in(t)
  if t > now then return t - now end
  return 0
end
-- The instant the state no longer matters: the bucket is full again and any pause is over.
local function horizon(t, p)
  if p > t then return p end
  return t
end
local function save(t, p)
  -- Full again (a release gave back everything): no state is the same state.
  if horizon(t, p) <= now then
    redis.call('DEL', key)
    return
  end
  local value
  if p > now then
    value = string.format('%s%d:%d', TAG, t, p)
  else
    value = string.format('%s%d', TAG, t)
  end
  put(value, horizon(t, p))
end
