-- Windows: re-read the state written at FE tokens per window (ARGV[14]; 0: nothing to
-- re-read) at this call's E, as the in-process window's change of quota does: a raised
-- count adds nothing to the window in progress. The window keeps the tokens counted, and
-- is charged at the first instant anything can go (now, the end of a pause, the last
-- booking) with what the raise would add there: what fits there stays what fitted.
-- A lowered count needs nothing (fewer fit). As for the token bucket, the state says not
-- which count wrote it: re-read twice, it only counts more.
if FE > 0 and FE < E then
  local t = math.max(base, tail())
  local extra = room(E, t) - room(FE, t)
  if extra > 0 then
    if MARKED then respread(extra, t) else admit(extra, t) end
    save()
  end
end
-- MARKED (a plan's quota): the raise as in process, `respread` (each window `state.lua`).
