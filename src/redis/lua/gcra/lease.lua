-- The token bucket's lease: first give back r unused tokens of an expired lease (as
-- `give`), then take up to k tokens (1..B) that fit now, but only if at least m of them
-- (1..k) do. Taking g tokens moves tat to max(tat, now) + g·T, exactly as g requests of one
-- token would, so the rate bound holds for what is leased.
-- Returns {granted g (0 or m..k), wait µs until m tokens fit (when g = 0), µs until the
-- bucket is full again}.
local function lease(q, k, m, r)
  local T, B, tau = q.T, q.B, q.tau
  if k < 1 or k > B or m < 1 or m > k or r > B then
    return redis.error_reply('ERR tower-throttle: bad arguments')
  end
  local tat, pause = q.tat, q.pause
  local changed = q.dirty
  if r > 0 and tat > now then
    local back_to = tat - r * T
    if back_to < now then back_to = now end
    if pause > now and back_to < pause + tau - T then back_to = pause + tau - T end
    if back_to < tat then
      tat = back_to
      changed = true
    end
  end
  -- Tokens that fit now: g·T <= now + tau - max(tat, now).
  local base = math.max(tat, now)
  local fit = math.floor((now + tau - base) / T)
  if fit < m then
    if changed or must_repair(q, false, horizon(tat, pause)) then save(q, tat, pause) end
    return {0, base + m * T - tau - now, full_in(tat)}
  end
  local g = math.min(k, fit)
  local new_tat = base + g * T
  save(q, new_tat, pause)
  return {g, 0, full_in(new_tat)}
end
