-- Sliding log: a refusal, and a release.
-- A refusal writes only to persist a clamp, to repair a missing or too-long TTL, or to give
-- the entries back the TTL they lost.
local function keep()
  local stale = newest ~= nil and redis.call('PTTL', log) < 0
  if stale or must_repair(dirty, horizon()) then save() end
end
-- Give back n tokens of an admission that was not used: the entry of n tokens booked for
-- the instant `at` (when > 0: a waiter that went away before it), else the newest entry of
-- n tokens logged by now (another limit refused it right after), looked for among the
-- newest first: O(log N). The ramp after a pause keeps the place it gave: a release never
-- lets the restart go faster.
local function give(n, at)
  local function take_one(members)
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
  if at > 0 then
    released = take_one(redis.call('ZRANGEBYSCORE', log, fmt(at), fmt(at)))
  else
    -- The newest entries first, in growing batches: the entry given back is almost always
    -- the newest, so a release costs O(log N), not the whole log.
    local from, k = 0, 16
    while not released do
      local batch = redis.call('ZREVRANGEBYSCORE', log, fmt(now), '-inf', 'LIMIT', from, k)
      released = take_one(batch)
      if #batch < k then break end
      from, k = from + k, k * 2
    end
  end
  -- A clamp made while reading the state is written too, with its TTL.
  if released or dirty then save() end
end
