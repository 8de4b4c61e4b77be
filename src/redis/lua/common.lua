-- tower-throttle: what every script shares (the call's arguments, a quota, its stored
-- value, TTLs). A quota is a table `q` (`quota` below): its parameters, keys and stored
-- value, to which its algorithm's `load` adds its state; every algorithm's functions take
-- it first, and are made once per run whatever the number of quotas.
-- KEYS[1] = the limit's key, a string; KEYS[2] = the same key + ':log' (a sorted set, used
-- by the sliding log and the sliding window's bookings; both carry the same {hash tag}).
-- A quota's arguments (a plan's quota's begin at ARGV[O + 1], `lua/stack/parts.lua`):
-- ARGV[1] = T, emission interval, µs (>= 1)     ARGV[2] = B, burst (>= 1)
-- ARGV[5] = tau, tolerance, µs (B·T or T)      ARGV[6] = W, window, µs (>= 1)
-- ARGV[7] = L, tokens per window (>= 1)
-- ARGV[11] = E, tokens per window at the rate in force (windows: 1 <= E <= L, below L while
--   a rate control holds the rate down; T is then the interval of E per window); absent: L.
--   A request of n > E tokens (n <= L, a cost the configured quota allows) sees a limit of
--   max(E, n): it goes when the window holds nothing else, so it never waits forever. L
--   still bounds what a state may hold (clamps), so a rate raised again never finds more
--   room than the configured quota gives.
-- ARGV[12] = FT, ARGV[13] = Ftau, ARGV[14] = FE: the parameters the state may have been
--   written with, after this process changed its own (a new quota, a rate control's new
--   rate): the interval and tolerance (token and leaky bucket), E (windows); absent or 0:
--   none. The state is re-read in the parameters of this call first, never holding more
--   tokens than it held in those (`lua/gcra/state.lua`, `lua/window/convert.lua`).
-- The call's, the same for every quota of a plan (read once, from the first):
-- ARGV[3] = the operation's argument (a plan's acquire and release read each quota's own,
--   at ARGV[O + 3])                              ARGV[4] = P, the longest pause, µs
-- ARGV[8] = 1 to book a later instant (acquire: a request that fits within the booking
--   horizon is admitted for that instant), 2 to count the tokens now whether they fit or
--   not (acquire: a debt), else 0; release: the instant of the booking
-- ARGV[9] = the fewest tokens a lease may grant, ARGV[10] = unused tokens of an expired lease
--   to give back (the token bucket's lease); acquire: the tokens to leave free after the
--   request (the reserve for critical requests; a plan's read each quota's own, at
--   ARGV[O + 9]), and the request's class (`lua/classes.lua`; pause: whether the classes
--   keep an account); else absent or 0
-- Integers only, all below 2^53 (exact in Lua's doubles); the caller checks it.
local x = tonumber(ARGV[3])
local P = tonumber(ARGV[4])
local book = tonumber(ARGV[8] or '0')
local need = tonumber(ARGV[9] or '0')
local back = tonumber(ARGV[10] or '0')
if not (x and P and book and need and back) or x < 0 or P < 0 or need < 0 or back < 0 then
  return redis.error_reply('ERR tower-throttle: bad arguments')
end
local function fmt(i) return string.format('%d', i) end
-- `v` with the end of a pause still ahead, `p`, appended (`:<p>`).
local function with_pause(v, p)
  if p > now then return v .. string.format(':%d', p) end
  return v
end
-- The TTL of a state that matters until `horizon`: whole ms, rounded up, at least 1.
local function ttl_ms(horizon)
  local ms = math.ceil((horizon - now) / 1000)
  if ms < 1 then ms = 1 end
  return ms
end
-- The quota whose arguments begin at ARGV[O + 1], its state at keys[1] (and keys[2]),
-- stored with `tag` (the leaky bucket's 'K'); nil when its arguments do not check out.
-- In a plan (`lua/stack/parts.lua`), its state is `plan.raws[slot]` and goes back to
-- `plan.values[slot]`, and `re` = {FT, Ftau, FE} from the plan's marker, written in the
-- same run as the state: exactly the parameters the state was written with (`marked`), so
-- the re-read needs none of the care a state re-read twice would (`lua/gcra/state.lua`).
local function quota(keys, O, tag, plan, slot, re)
  local T = tonumber(ARGV[O + 1])
  local B = tonumber(ARGV[O + 2])
  local tau = tonumber(ARGV[O + 5])
  local W = tonumber(ARGV[O + 6])
  local L = tonumber(ARGV[O + 7])
  local E = tonumber(ARGV[O + 11] or ARGV[O + 7])
  local FT = tonumber(ARGV[O + 12] or '0')
  local Ftau = tonumber(ARGV[O + 13] or '0')
  local FE = tonumber(ARGV[O + 14] or '0')
  if re then FT, Ftau, FE = re[1], re[2], re[3] end
  if not (T and B and tau and W and L and E and FT and Ftau and FE) or T < 1 or B < 1
    or tau < T or W < 1 or L < 1 or E < 1 or E > L or FT < 0 or FE < 0
    or (FT > 0 and Ftau < FT) then
    return nil
  end
  local q = {T = T, B = B, tau = tau, W = W, L = L, E = E, FT = FT, Ftau = Ftau, FE = FE,
    marked = re ~= nil, key = keys[1], log = keys[2], tag = tag, plan = plan, slot = slot}
  if plan then q.raw = plan.raws[slot] else q.raw = redis.call('GET', q.key) end
  return q
end
-- Every write carries its TTL; a plan's quota writes to the plan's value, which carries
-- the TTL of all its quotas.
local function put(q, value, horizon)
  local plan = q.plan
  if plan then
    plan.values[q.slot] = value or false
    plan.wrote = true
    return
  end
  redis.call('SET', q.key, value, 'PX', fmt(ttl_ms(horizon)))
end
-- No state is the same state as this one: forget it.
local function drop(q)
  if q.plan then return put(q, nil) end
  redis.call('DEL', q.key)
end
-- Whether a refusal must write anyway: to persist a clamp (`dirty`), or to repair a missing
-- or too-long TTL (a plan's value repairs its own).
local function must_repair(q, dirty, horizon)
  if dirty then return true end
  if q.plan then return false end
  local ttl = redis.call('PTTL', q.key)
  return ttl < 0 or ttl > ttl_ms(horizon) + 1
end
-- KEYS[2] belongs to the state in KEYS[1] (the log's entries, the sliding window's
-- bookings): a value of another type there is garbage, deleted (what it held no longer
-- counts), where a key of another type at KEYS[1] may be someone else's and is left alone.
local function stray_set(q)
  local t = redis.call('TYPE', q.log)['ok']
  if t ~= 'zset' and t ~= 'none' then redis.call('DEL', q.log) end
end
-- A value of another algorithm is no state of this one: count it as fresh and overwrite it;
-- a sliding log's entries go with it.
local function foreign(q)
  if string.sub(q.raw, 1, 1) == 'L' then redis.call('DEL', q.log) end
end
