-- Sliding log: a refusal, and a release.
-- A refusal writes only to persist a clamp, to repair a missing or too-long TTL, or to give
-- the entries back the TTL they lost.
local function keep(q)
  local stale = q.newest ~= nil and redis.call('PTTL', q.log) < 0
  if stale or must_repair(q, q.dirty, horizon(q)) then save(q) end
end
-- Take n tokens out of the log: the first entry of n tokens among `members`, else, with
-- `at` (all of them logged at that instant, interchangeable), the smallest entry of more,
-- which keeps the rest (a settlement's partial refund). Whether there was one.
local function take_one(q, members, n, at)
  local best, size = nil, nil
  for i = 1, #members do
    local t = tokens_of(q, members[i])
    if t == n then best, size = i, t; break end
    if at and t > n and (size == nil or t < size) then best, size = i, t end
  end
  if not best then return false end
  redis.call('ZREM', q.log, members[best])
  if size > n then
    q.seq = q.seq + 1
    redis.call('ZADD', q.log, fmt(at), string.format('%d:%d', q.seq, size - n))
  end
  q.total = q.total - n
  find_newest(q)
  return true
end
-- Give back n tokens of an admission that was not used: of the entry booked for the
-- instant `at` (when > 0: a waiter that went away before it), else the newest entry of
-- n tokens logged by now (another limit refused it right after), looked for among the
-- newest first: O(log N). The ramp after a pause keeps the place it gave: a release never
-- lets the restart go faster.
local function give(q, n, at)
  local released = false
  if at > 0 then
    released = take_one(q, redis.call('ZRANGEBYSCORE', q.log, fmt(at), fmt(at)), n, at)
  else
    -- The newest entries first, in growing batches: the entry given back is almost always
    -- the newest, so a release costs O(log N), not the whole log.
    local from, k = 0, 16
    while not released do
      local batch = redis.call('ZREVRANGEBYSCORE', q.log, fmt(now), '-inf', 'LIMIT', from, k)
      released = take_one(q, batch, n)
      if #batch < k then break end
      from, k = from + k, k * 2
    end
  end
  -- A clamp made while reading the state is written too, with its TTL.
  if released or q.dirty then save(q) end
end
