-- release, for a plan: give back n_i = ARGV[(i - 1) * 14 + 3] tokens of an admission that
-- was not used to quota i (`give`; booked for the instant ARGV[8] when > 0; 0: nothing).
-- Returns {1, 0, µs until the state no longer matters}.
local ns = {}
for i = 1, K do
  local n = tonumber(ARGV[(i - 1) * 14 + 3])
  if not n or n < 0 or n > parts[i].cap then
    return redis.error_reply('ERR tower-throttle: bad arguments')
  end
  ns[i] = n
end
for i = 1, K do
  if ns[i] > 0 then ALGOS[i].give(parts[i], ns[i], book) end
end
return {1, 0, commit() - now}
