-- Windows: re-read the state written at FE tokens per window (0: nothing to re-read) at
-- this call's E, as the in-process window's change of quota does: a raised count adds
-- nothing to the window in progress. The window keeps the tokens counted, and is charged
-- at the first instant anything can go (now, the end of a pause, the last booking) with
-- what the raise would add there: what fits there stays what fitted. A lowered count
-- needs nothing (fewer fit). As for the token bucket, the state says not which count wrote
-- it: re-read twice, it only counts more. A `marked` quota (a plan's, whose marker says
-- which count wrote it) takes the raise as in process, `respread` (each window's
-- `state.lua`).
local function convert(q)
  local FE, E = q.FE, q.E
  if FE > 0 and FE < E then
    local t = math.max(q.base, tail(q))
    local extra = room(q, E, t) - room(q, FE, t)
    if extra > 0 then
      if q.marked then respread(q, extra, t) else admit(q, extra, t) end
      save(q)
    end
  end
end
