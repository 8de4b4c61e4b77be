-- A plan of several quotas, decided in one run. The script defines, before this file,
-- `lua/common.lua`, each algorithm's functions once, and ALGOS, TAGS: each quota's
-- algorithm and state tag.
-- KEYS[1] = the plan's state, one string; KEYS[1 + i] = quota i's sorted set (its `:log`).
-- ARGV = each quota's 14 arguments in turn (`lua/common.lua`), then two markers: this
-- call's and the base plan's (a keyed limit's default plan as built). A marker is
-- "<sig>|<sig>|…", one per quota, sig = "<algorithm>:<W>:<T>:<tau>:<E>" of the arguments
-- the quota's state is kept in. Every key carries the same {hash tag}: one slot.
-- The state is "[<marker>#]<state 1>|<state 2>|…", each quota's as its algorithm writes it
-- alone (empty: none), with the TTL of the one that lasts longest (a state past its own
-- horizon reads as none by arithmetic alone). The marker says which parameters the states
-- were written with; none: the base plan's, so a key that keeps to it costs what one
-- quota's state costs. A state written under other parameters (the key's plan changed, or
-- the plan's quota) is re-read in this call's first, as a change of quota does
-- (`lua/gcra/state.lua`, `lua/window/convert.lua`, `RE`: exactly as in process): no burst,
-- fractional progress kept. A quota whose algorithm or window changed starts afresh (a
-- state laid out in other windows cannot be read in these), as does one the marker names
-- in a way that does not parse.
local K = #ALGOS
local current, based = ARGV[K * 14 + 1], ARGV[K * 14 + 2]
local stored = redis.call('GET', KEYS[1])
-- The quotas' states as read, as their `put` leaves them (false: none), and whether any
-- changed (`lua/common.lua`).
local plan = {raws = {}, values = {}, wrote = false}
local old = nil
if stored then
  local body = stored
  local h = string.find(stored, '#', 1, true)
  if h then
    old = string.sub(stored, 1, h - 1)
    body = string.sub(stored, h + 1)
  elseif current ~= based then
    old = based
  end
  local i = 1
  for v in string.gmatch(body .. '|', '([^|]*)|') do
    if v ~= '' then plan.raws[i] = v end
    i = i + 1
  end
end
local function sigs_of(marker)
  local t = {}
  for s in string.gmatch(marker, '[^|]+') do t[#t + 1] = s end
  return t
end
-- The states written under other parameters than this call's: each one's sig, else none.
local olds, sigs = {}, {}
if old and old ~= current then olds, sigs = sigs_of(old), sigs_of(current) end
local parts = {}
for i = 1, K do
  local prev, re = olds[i], nil
  if prev and prev ~= sigs[i] then
    plan.wrote = true
    local f, w, t, ta, e = string.match(prev, '^(%u):(%d+):(%d+):(%d+):(%d+)$')
    local sf, sw = string.match(sigs[i], '^(%u):(%d+):')
    t, ta, e = tonumber(t), tonumber(ta), tonumber(e)
    local gcra = sf == 'T' or sf == 'K'
    if f == sf and (gcra or w == sw) and t and t >= 1 and ta >= t and e >= 1
      and ta < 9007199254740992 and e < 9007199254740992 then
      re = {t, ta, e}
    else
      plan.raws[i] = nil
      redis.call('DEL', KEYS[1 + i])
    end
  end
  plan.values[i] = plan.raws[i] or false
  local q = quota({KEYS[1], KEYS[1 + i]}, (i - 1) * 14, TAGS[i], plan, i, re)
  if not q then return redis.error_reply('ERR tower-throttle: bad arguments') end
  ALGOS[i].load(q)
  parts[i] = q
end
-- The instant the last of the quotas' states stops mattering (at least now).
local function later()
  local h = now
  for i = 1, K do h = math.max(h, ALGOS[i].later(parts[i])) end
  return h
end
-- Write the plan's state once: when a quota's changed or its marker did, or to repair a
-- missing or too-long TTL. Returns `later()`.
local function commit()
  local h = later()
  local ms = math.ceil((h - now) / 1000)
  if ms < 1 then ms = 1 end
  if not plan.wrote then
    if not stored then return h end
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl >= 0 and ttl <= ms + 1 then return h end
  end
  local vs, any = {}, false
  for i = 1, K do
    vs[i] = plan.values[i] or ''
    if plan.values[i] then any = true end
  end
  if not any then
    redis.call('DEL', KEYS[1])
    return h
  end
  local value = table.concat(vs, '|')
  if current ~= based then value = current .. '#' .. value end
  redis.call('SET', KEYS[1], value, 'PX', string.format('%d', ms))
  return h
end
