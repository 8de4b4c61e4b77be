-- Token and leaky bucket (GCRA): the state, its clamp and its save, of a quota `q`.
-- The state is "<tag><tat>" or "<tag><tat>:<pause>" (µs, Redis clock): the tag is '' for
-- the token bucket, 'K' for the leaky bucket. `tat` is the instant the bucket is full
-- again; `pause` the end of a pause in force. tau = B·T (token bucket) or T (leaky bucket).
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
-- Write the state of tat `t` and pause `p`.
local function save(q, t, p)
  -- Full again (a release gave back everything): no state is the same state.
  if horizon(t, p) <= now then
    drop(q)
    return
  end
  put(q, with_pause(string.format('%s%d', q.tag, t), p), horizon(t, p))
end
-- floor(d · T / FT) for d >= 0, exact while the product stays below 2^53; else one µs less
-- (`less`) or more: rounded towards fewer tokens either way.
local function scaled(d, T, FT, less)
  local k = math.floor(d / FT)
  local r = d - k * FT
  local f = r * T
  local q = math.floor(f / FT)
  if f + FT >= 9007199254740992 then
    if less then q = math.max(q - 1, 0) else q = q + 1 end
  elseif not less and q * FT < f then
    q = q + 1
  end
  return k * T + q
end
-- Read the state (none: a bucket full for ever) into q.tat and q.pause, and q.dirty when a
-- clamp must be written; q.cap, the most tokens one request takes, and q.ahead, how far
-- ahead a waiter may book (the booking horizon H = max(1 s, tau)).
local function load(q)
  local T, B, tau = q.T, q.B, q.tau
  local tat, pause, dirty = 0, 0, false
  if q.raw then
    local a, b = string.match(q.raw, '^' .. q.tag .. '(%d+)(:?%d*)$')
    if a and (b == '' or #b > 1) then
      tat = tonumber(a)
      if b ~= '' then pause = tonumber(string.sub(b, 2)) end
    else
      dirty = true -- not ours: count it as a full bucket, and overwrite it
      foreign(q)
    end
  end
  local H = math.max(1000000, tau)
  -- Clamp what no legitimate state can be (a clock stepped back after a failover, a stray
  -- write): a pause ends within P; a bucket is full again at most max(tau, B·T) after an
  -- instant within H of now (an admission of n <= B tokens leaves tat at most max(tau, n·T)
  -- after its instant: for the leaky bucket, tau = T is less than a weighted cost; a
  -- booking lies at most H ahead), or tau − T after the end of the pause (its first token
  -- is due when it ends); once re-read in this call's parameters (below). So only a stored
  -- pause reaches further than the booking horizon, and no further than P.
  -- A clamp is written back, even when the request is refused, so it cannot recur.
  if pause > now + P then pause = now + P; dirty = true end
  local base = now
  if pause > now then base = pause end
  -- Re-read the state written with the interval FT and tolerance Ftau (FT = 0: nothing to
  -- re-read) in this call's T and tau, before the bucket's clamp (a state legitimate in
  -- the parameters before may lie beyond this call's span), as the in-process bucket's
  -- change of quota does: the tokens held at `base` = max(now, pause) (the end of a pause:
  -- its debt is time, not tokens) are kept, capped at the new burst, and a debt (instants
  -- booked ahead) is kept in tokens: `(Ftau − ahead) / FT` tokens, `ahead` = tat − base,
  -- put `(Ftau − ahead) · T / FT` µs below base + tau (rounded to hold no more).
  -- Unless `marked` (the plan's marker says which parameters wrote the state), the state
  -- says not which parameters wrote it: a state re-read twice (by a call racing with the
  -- first one after the change, or by another process that changed after this one wrote
  -- it) must not gain tokens. So the re-read moves tat later freely (fewer tokens), but
  -- earlier only while the state holds no token at this call's parameters, and never below
  -- none (base + tau): it holds the fewer of the tokens re-read and those the state leaves
  -- at this call's parameters (none when it owes).
  -- (A value beyond 2^53 is garbage: the clamp alone handles it.)
  local FT, Ftau = q.FT, q.Ftau
  local converted = false
  if FT > 0 and tat < 9007199254740992 then
    local ahead = tat - base
    if ahead < 0 then ahead = 0 end
    local target
    if ahead <= Ftau then
      local held = scaled(Ftau - ahead, T, FT, true)
      if held > tau then held = tau end
      target = base + tau - held
    else
      target = base + tau + scaled(ahead - Ftau, T, FT, false)
    end
    local to = target
    if q.marked then
      -- Turns booked before the change keep their order: nothing goes before the last
      -- instant booked (at most tat − Ftau), as in process.
      local booked = tat - Ftau
      if booked > now then to = math.max(to, booked + tau - math.min(T, tau)) end
    else
      to = math.max(target, math.min(tat, base + tau))
    end
    if to ~= tat then
      tat = to
      converted = true
    end
  end
  -- The bucket's clamp, in this call's parameters.
  local reach = math.max(now + H + math.max(tau, B * T), pause + tau - T)
  if tat > reach then tat = reach; dirty = true end
  -- While paused, the first token is due when the pause ends.
  if pause > now and tat < pause + tau - T then tat = pause + tau - T; dirty = true end
  q.tat, q.pause, q.dirty = tat, pause, dirty
  q.cap, q.ahead = B, H
  -- A state re-read in this call's parameters is written, whatever the operation does.
  if converted then save(q, tat, pause) end
end
