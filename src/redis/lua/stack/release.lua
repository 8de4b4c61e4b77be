-- release, for a plan: give back n = ARGV[3] tokens of an admission that was not used to
-- every quota (`give`; booked for the instant ARGV[8] when > 0).
-- Returns {1, 0, µs until the state no longer matters}.
local n = x
for i = 1, K do
  if n < 1 or n > parts[i].cap then
    return redis.error_reply('ERR tower-throttle: bad arguments')
  end
end
for i = 1, K do ALGOS[i].give(parts[i], n, book) end
return {1, 0, commit() - now}
