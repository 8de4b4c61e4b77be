-- acquire: take n = ARGV[3] tokens (1..L) if the tokens of the last W µs and the ramp after a
-- pause leave room for them.
-- Returns {admitted 0|1, wait µs until they fit, µs until the state no longer matters}.
local n = x
if n < 1 or n > L then return redis.error_reply('ERR tower-throttle: bad arguments') end
local at = ramp_earliest(earliest, n, base)
if at > now then
  local stale = newest ~= nil and redis.call('PTTL', log) < 0
  if stale or must_repair(dirty, horizon()) then save() end
  return {0, at - now, horizon() - now}
end
add(now, n)
ramp_commit(n, now)
save()
return {1, 0, horizon() - now}
