-- release: give back n = ARGV[3] tokens (1..L) of an admission that was not used: the entry
-- of n tokens booked for the instant ARGV[8] (when > 0: a waiter that went away before
-- it), else the newest entry of n tokens logged by now (another limit refused it right
-- after). O(N). The ramp after a pause keeps the place it gave: a release never lets the
-- restart go faster.
-- Returns {1, 0, µs until the state no longer matters}.
local n = x
if n < 1 or n > L then return redis.error_reply('ERR tower-throttle: bad arguments') end
local members
if book > 0 then
  members = redis.call('ZRANGEBYSCORE', log, fmt(book), fmt(book))
else
  members = redis.call('ZREVRANGEBYSCORE', log, fmt(now), '-inf')
end
local released = false
for i = 1, #members do
  if tokens_of(members[i]) == n then
    redis.call('ZREM', log, members[i])
    total = total - n
    find_newest()
    released = true
    break
  end
end
-- A clamp made while reading the state is written too, with its TTL.
if released or dirty then save() end
return {1, 0, horizon() - now}
