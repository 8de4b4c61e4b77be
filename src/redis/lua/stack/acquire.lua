-- acquire, for a plan: n = ARGV[3] tokens of every quota, at the earliest instant they fit
-- in all (fits are upward-closed: one pass finds it, a second confirms it), counted in all
-- or in none; with `book` (ARGV[8]), within the shortest booking horizon of the quotas.
-- Returns `lua/acquire.lua`'s reply, then the quota (1..K) that alone would wait longest
-- (the first of those that wait as long; 0 when admitted).
local n = x
local ahead = nil
for i = 1, K do
  local q = parts[i]
  if n < 1 or n > q.cap then return redis.error_reply('ERR tower-throttle: bad arguments') end
  if ahead == nil or q.ahead < ahead then ahead = q.ahead end
end
local at = now
for _ = 1, 4 do
  local next = at
  for i = 1, K do next = math.max(next, ALGOS[i].fits(parts[i], n, at)) end
  if next == at then break end
  at = next
end
local limit = 0
if book == 1 then limit = ahead end
if at - now > limit then
  local part, longest = 1, 0
  for i = 1, K do
    ALGOS[i].keep(parts[i])
    local wait = ALGOS[i].fits(parts[i], n, now) - now
    if wait > longest then part, longest = i, wait end
  end
  return {0, at - now, commit() - now, 0, part}
end
for i = 1, K do ALGOS[i].take(parts[i], n, at) end
return {1, at - now, commit() - now, at, 0}
