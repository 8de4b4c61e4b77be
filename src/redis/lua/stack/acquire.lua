-- acquire, for a plan: n_i = ARGV[(i - 1) * 14 + 3] tokens of quota i (0: nothing of it),
-- at the earliest instant they fit in all (fits are upward-closed: one pass finds it, a
-- second confirms it), counted in all or in none; with `book` (ARGV[8]) = 1, within the
-- shortest booking horizon of the quotas; with `book` = 2, counted now whether they fit or
-- not (a settlement's overrun, owed: the clamps bound the debt).
-- Returns `lua/acquire.lua`'s reply: refused, with the quota (1..K) that alone would wait
-- longest (the first of those that wait as long; 0 when admitted), then why.
local ns, keeps, ahead = {}, {}, nil
for i = 1, K do
  local q, n = parts[i], tonumber(ARGV[(i - 1) * 14 + 3])
  local kept = tonumber(ARGV[(i - 1) * 14 + 9] or '0')
  if not n or n < 0 or n > q.cap or not kept or kept < 0 then
    return redis.error_reply('ERR tower-throttle: bad arguments')
  end
  ns[i], keeps[i] = n, kept
  if ahead == nil or q.ahead < ahead then ahead = q.ahead end
end
-- With the reserve kept beside each amount (`spare`), or without.
local function fits(i, from, spare)
  if ns[i] == 0 then return from end
  local n = ns[i]
  if spare then n = math.min(n + keeps[i], parts[i].cap) end
  return ALGOS[i].fits(parts[i], n, from)
end
local function earliest(spare)
  local at = now
  for _ = 1, 4 do
    if book == 2 then break end
    local next = at
    for i = 1, K do next = math.max(next, fits(i, at, spare)) end
    if next == at then break end
    at = next
  end
  return at
end
local at = earliest(true)
local limit = 0
if book == 1 then limit = ahead end
if at - now > limit then
  local part, longest = 1, 0
  for i = 1, K do
    ALGOS[i].keep(parts[i])
    local wait = fits(i, now, true) - now
    if wait > longest then part, longest = i, wait end
  end
  local shed = 0
  if earliest(false) - now <= limit then shed = 1 end
  wanted(at - now - limit, ahead, parts[1].T)
  return {0, at - now, commit() - now, 0, part, shed}
end
local wait = refused_share(ns[1], at, ahead, parts[1].T)
if wait then
  for i = 1, K do ALGOS[i].keep(parts[i]) end
  return {0, wait, commit() - now, 0, 1, 2}
end
for i = 1, K do
  if ns[i] > 0 then ALGOS[i].take(parts[i], ns[i], at) end
end
return {1, at - now, commit() - now, at, 0}
