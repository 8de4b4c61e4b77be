-- release: give back n = ARGV[3] tokens (1..L) of an admission another limit refused right
-- after: remove the newest entry of n tokens logged by now, if any. O(N). The ramp after a
-- pause keeps the place it gave: a release never lets the restart go faster.
-- Returns {1, 0, µs until the state no longer matters}.
local n = x
if n < 1 or n > L then return redis.error_reply('ERR tower-throttle: bad arguments') end
local members = redis.call('ZREVRANGEBYSCORE', log, fmt(now), '-inf')
for i = 1, #members do
  if tokens_of(members[i]) == n then
    redis.call('ZREM', log, members[i])
    total = total - n
    find_newest()
    save()
    break
  end
end
return {1, 0, horizon() - now}
