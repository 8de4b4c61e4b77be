-- Fixed and sliding window: a refusal, and a release.
-- A refusal writes only to persist a clamp or to repair a missing or too-long TTL.
local function keep()
  if must_repair(dirty, horizon()) then save() end
end
-- Give back n tokens of an admission that was not used: the one booked for the instant `at`
-- (when > 0), else one made now. Only from a window the state still keeps (nothing once
-- that window is over), never below empty; a booking's turn goes to the next request (the
-- sliding window's latest booking becomes the latest one left). The ramp after a pause
-- keeps the place it gave: a release never lets the restart go faster.
local function give(n, at)
  local v = cw
  if at > 0 then v = math.floor(at / W) end
  if refund(v, n, at) or dirty then save() end
end
