-- A plan of several quotas, decided in one run. The script defines, before this file, one
-- maker per algorithm (`part_<letter>`: `lua/common.lua`, the algorithm's state and
-- operations in a function of its own keys, arguments and store), and MAKE, TAGS, SIGS:
-- each quota's maker, state tag and algorithm letter (T token, K leaky, F fixed, S sliding,
-- L log).
-- KEYS[1] = the plan's state, one string; KEYS[1 + i] = quota i's sorted set (its `:log`).
-- ARGV = each quota's 14 arguments in turn (`lua/common.lua`), then the base plan: the
-- number of its quotas, then five integers per quota: its algorithm (1 T, 2 K, 3 F, 4 S,
-- 5 L), W, T, tau and E. Every key carries the same {hash tag}: one slot.
-- The state is "[<marker>#]<state 1>|<state 2>|…", each quota's as its algorithm writes it
-- alone (empty: none), with the TTL of the one that lasts longest (a state past its own
-- horizon reads as none by arithmetic alone). The marker says which parameters the states
-- were written with, "<sig>|<sig>|…", sig = "<algorithm>:<W>:<T>:<tau>:<E>"; no marker: the
-- base plan's (a keyed limit's default plan as built), so a key that keeps to it costs what
-- one quota's state costs. A state written under other parameters (the key's plan changed,
-- or the plan's quota) is re-read in this call's first, as a change of quota does
-- (`lua/gcra/state.lua`, `lua/window/convert.lua`, `marked`: exactly as in process): no
-- burst, fractional progress kept. A quota whose algorithm or window changed starts afresh
-- (a state laid out in other windows cannot be read in these), as does one the marker lacks
-- or names in a way that does not parse.
local K = #MAKE
local LETTERS = {'T', 'K', 'F', 'S', 'L'}
local args, sigs = {}, {}
for i = 1, K do
  local a = {}
  for j = 1, 14 do a[j] = ARGV[(i - 1) * 14 + j] end
  args[i] = a
  sigs[i] = string.format('%s:%s:%s:%s:%s', SIGS[i], a[6], a[1], a[5], a[11])
end
local base = {}
local o = K * 14 + 1
for j = 1, tonumber(ARGV[o]) do
  local p = o + 5 * (j - 1)
  local letter = LETTERS[tonumber(ARGV[p + 1])] or '?'
  base[j] = string.format('%s:%s:%s:%s:%s', letter, ARGV[p + 2], ARGV[p + 3], ARGV[p + 4],
    ARGV[p + 5])
end
local current, based = table.concat(sigs, '|'), table.concat(base, '|')
local stored = redis.call('GET', KEYS[1])
local raws, old = {}, {}
if stored then
  local body = stored
  local h = string.find(stored, '#', 1, true)
  if h then
    for s in string.gmatch(string.sub(stored, 1, h - 1), '[^|]+') do old[#old + 1] = s end
    body = string.sub(stored, h + 1)
  elseif current ~= based then
    old = base
  end
  local i = 1
  for v in string.gmatch(body .. '|', '([^|]*)|') do
    if v ~= '' then raws[i] = v end
    i = i + 1
  end
end
-- Each quota's state, as its `put` leaves it (false: none), and whether any changed.
local values, wrote = {}, false
local parts = {}
for i = 1, K do
  local a, prev = args[i], old[i]
  if prev and prev ~= sigs[i] then
    wrote = true
    local f, w, t, ta, e = string.match(prev, '^(%u):(%d+):(%d+):(%d+):(%d+)$')
    t, ta, e = tonumber(t), tonumber(ta), tonumber(e)
    local gcra = SIGS[i] == 'T' or SIGS[i] == 'K'
    if f == SIGS[i] and (gcra or w == a[6]) and t and t >= 1 and ta >= t and e >= 1
      and ta < 9007199254740992 and e < 9007199254740992 then
      a[12], a[13], a[14] = t, ta, e
      a.marked = true
    else
      raws[i] = nil
      redis.call('DEL', KEYS[1 + i])
    end
  end
  values[i] = raws[i] or false
  local store = {raw = raws[i]}
  function store.put(value)
    values[i] = value or false
    wrote = true
  end
  local p = MAKE[i](TAGS[i], {KEYS[1], KEYS[1 + i]}, a, store)
  if p.err then return p end
  parts[i] = p
end
-- The instant the last of the quotas' states stops mattering (at least now).
local function later()
  local h = now
  for i = 1, K do h = math.max(h, parts[i].later()) end
  return h
end
-- Write the plan's state once: when a quota's changed or its marker did, or to repair a
-- missing or too-long TTL.
local function commit()
  local h = later()
  local ms = math.ceil((h - now) / 1000)
  if ms < 1 then ms = 1 end
  if not wrote then
    if not stored then return end
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl >= 0 and ttl <= ms + 1 then return end
  end
  local vs, any = {}, false
  for i = 1, K do
    vs[i] = values[i] or ''
    if values[i] then any = true end
  end
  if not any then
    redis.call('DEL', KEYS[1])
    return
  end
  local value = table.concat(vs, '|')
  if current ~= based then value = current .. '#' .. value end
  redis.call('SET', KEYS[1], value, 'PX', string.format('%d', ms))
end
