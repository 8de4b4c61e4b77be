-- acquire, for a plan: n_i = ARGV[(i - 1) * 14 + 3] tokens of quota i (0: nothing of it),
-- at the earliest instant they fit in all (fits are upward-closed: one pass finds it, a
-- second confirms it), counted in all or in none; with `book` (ARGV[8]) = 1, within the
-- shortest booking horizon of the quotas; with `book` = 2, counted now whether they fit or
-- not (a settlement's overrun, owed: the clamps bound the debt).
-- Returns `lua/acquire.lua`'s reply, then the quota (1..K) that alone would wait longest
-- (the first of those that wait as long; 0 when admitted).
local ns, ahead = {}, nil
for i = 1, K do
  local q, n = parts[i], tonumber(ARGV[(i - 1) * 14 + 3])
  if not n or n < 0 or n > q.cap then return redis.error_reply('ERR tower-throttle: bad arguments') end
  ns[i] = n
  if ahead == nil or q.ahead < ahead then ahead = q.ahead end
end
local function fits(i, from)
  if ns[i] == 0 then return from end
  return ALGOS[i].fits(parts[i], ns[i], from)
end
local at = now
for _ = 1, 4 do
  if book == 2 then break end
  local next = at
  for i = 1, K do next = math.max(next, fits(i, at)) end
  if next == at then break end
  at = next
end
local limit = 0
if book == 1 then limit = ahead end
if at - now > limit then
  local part, longest = 1, 0
  for i = 1, K do
    ALGOS[i].keep(parts[i])
    local wait = fits(i, now) - now
    if wait > longest then part, longest = i, wait end
  end
  return {0, at - now, commit() - now, 0, part}
end
for i = 1, K do
  if ns[i] > 0 then ALGOS[i].take(parts[i], ns[i], at) end
end
return {1, at - now, commit() - now, at, 0}
