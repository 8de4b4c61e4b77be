-- Fixed and sliding window: a refusal, and a release.
-- A refusal writes only to persist a clamp or to repair a missing or too-long TTL.
local function keep(q)
  if must_repair(q, q.dirty, horizon(q)) then save(q) end
end
-- Give back n tokens of an admission that was not used: the one booked for the instant `at`
-- (when > 0), else one made now. Only from a window the state still keeps (nothing once
-- that window is over), never below empty; a booking's turn goes to the next request (the
-- sliding window's latest booking becomes the latest one left). The ramp after a pause
-- keeps the place it gave: a release never lets the restart go faster.
local function give(q, n, at)
  local v = q.cw
  if at > 0 then v = math.floor(at / q.W) end
  if refund(q, v, n, at) or q.dirty then save(q) end
end
