-- release: give back n = ARGV[3] tokens (1..L) of an admission that was not used: the entry
-- of n tokens booked for the instant ARGV[8] (when > 0: a waiter that went away before
-- it), else the newest entry of n tokens logged by now (another limit refused it right
-- after), looked for among the newest first: O(log N). The ramp after a pause keeps the
-- place it gave: a release never lets the restart go faster.
-- Returns {1, 0, µs until the state no longer matters}.
local n = x
if n < 1 or n > L then return redis.error_reply('ERR tower-throttle: bad arguments') end
local function take(members)
  for i = 1, #members do
    if tokens_of(members[i]) == n then
      redis.call('ZREM', log, members[i])
      total = total - n
      find_newest()
      return true
    end
  end
  return false
end
local released = false
if book > 0 then
  released = take(redis.call('ZRANGEBYSCORE', log, fmt(book), fmt(book)))
else
  -- The newest entries first, in growing batches: the entry given back is almost always
  -- the newest, so a release costs O(log N), not the whole log.
  local from, k = 0, 16
  while not released do
    local batch = redis.call('ZREVRANGEBYSCORE', log, fmt(now), '-inf', 'LIMIT', from, k)
    released = take(batch)
    if #batch < k then break end
    from, k = from + k, k * 2
  end
end
-- A clamp made while reading the state is written too, with its TTL.
if released or dirty then save() end
return {1, 0, horizon() - now}
