-- tower-throttle: what every script shares (arguments, Redis clock, the stored value, TTLs).
-- In a plan's script, a quota's arguments begin at ARGV[O + 1] (O = 0 for one quota).
-- KEYS[1] = the limit's key, a string; KEYS[2] = the same key + ':log' (a sorted set, used
-- by the sliding log only; both carry the same {hash tag}).
-- ARGV[1] = T, emission interval, µs (>= 1)     ARGV[2] = B, burst (>= 1)
-- ARGV[3] = the operation's argument           ARGV[4] = P, the longest pause, µs
-- ARGV[5] = tau, tolerance, µs (B·T or T)      ARGV[6] = W, window, µs (>= 1)
-- ARGV[7] = L, tokens per window (>= 1)      ARGV[8] = 1 to book a later instant (token
--   and leaky bucket's acquire: a request that fits within H = max(1 s, tau) is admitted
--   for that instant), else 0
-- ARGV[9] = the fewest tokens a lease may grant, ARGV[10] = unused tokens of an expired lease
--   to give back (the token bucket's lease only; else absent or 0)
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
-- RE (a plan's quota only, `lua/stack/parts.lua`): {FT, Ftau, FE} from the plan's marker,
--   written in the same run as the state: exactly the parameters the state was written
--   with, so the re-read needs none of the care a state re-read twice would
--   (`lua/gcra/state.lua`). Else nil.
-- Integers only, all below 2^53 (exact in Lua's doubles); the caller checks it.
local T = tonumber(ARGV[O + 1])
local B = tonumber(ARGV[O + 2])
local x = tonumber(ARGV[O + 3])
local P = tonumber(ARGV[O + 4])
local tau = tonumber(ARGV[O + 5])
local W = tonumber(ARGV[O + 6])
local L = tonumber(ARGV[O + 7])
local book = tonumber(ARGV[O + 8] or '0')
local need = tonumber(ARGV[O + 9] or '0')
local back = tonumber(ARGV[O + 10] or '0')
local E = tonumber(ARGV[O + 11] or ARGV[O + 7])
local FT = tonumber(ARGV[O + 12] or '0')
local Ftau = tonumber(ARGV[O + 13] or '0')
local FE = tonumber(ARGV[O + 14] or '0')
local MARKED = RE ~= nil
if MARKED then FT, Ftau, FE = RE[1], RE[2], RE[3] end
if not (T and B and x and P and tau and W and L and book and need and back and E and FT
  and Ftau and FE) or T < 1 or B < 1 or x < 0 or P < 0 or tau < T or W < 1 or L < 1
  or need < 0 or back < 0 or E < 1 or E > L or FT < 0 or FE < 0 or (FT > 0 and Ftau < FT)
  then
  return redis.error_reply('ERR tower-throttle: bad arguments')
end
-- STORE (a plan's quota, `lua/stack/parts.lua`): the plan keeps every quota's state in one
-- value at KEYS[1], read and written once per run: `raw` comes from it, `put` and `drop`
-- go to it, and it repairs the TTL for all its quotas. Else (nil) the state is KEYS[1].
local key = KEYS[1]
local raw
if STORE then raw = STORE.raw else raw = redis.call('GET', key) end
local function fmt(i) return string.format('%d', i) end
-- The TTL of a state that matters until `horizon`: whole ms, rounded up, at least 1.
local function ttl_ms(horizon)
  local ms = math.ceil((horizon - now) / 1000)
  if ms < 1 then ms = 1 end
  return ms
end
-- Every write carries its TTL.
local function put(value, horizon)
  if STORE then return STORE.put(value) end
  redis.call('SET', key, value, 'PX', fmt(ttl_ms(horizon)))
end
-- No state is the same state as this one: forget it.
local function drop()
  if STORE then return STORE.put(nil) end
  redis.call('DEL', key)
end
-- Whether a refusal must write anyway: to persist a clamp (`dirty`), or to repair a missing
-- or too-long TTL.
local function must_repair(dirty, horizon)
  if dirty then return true end
  if STORE then return false end
  local ttl = redis.call('PTTL', key)
  return ttl < 0 or ttl > ttl_ms(horizon) + 1
end
-- KEYS[2] belongs to the state in KEYS[1] (the log's entries, the sliding window's
-- bookings): a value of another type there is garbage, deleted (what it held no longer
-- counts), where a key of another type at KEYS[1] may be someone else's and is left alone.
local function stray_set()
  local t = redis.call('TYPE', KEYS[2])['ok']
  if t ~= 'zset' and t ~= 'none' then redis.call('DEL', KEYS[2]) end
end
-- A value of another algorithm is no state of this one: count it as fresh and overwrite it;
-- a sliding log's entries go with it.
local function foreign()
  if string.sub(raw, 1, 1) == 'L' then redis.call('DEL', KEYS[2]) end
end
