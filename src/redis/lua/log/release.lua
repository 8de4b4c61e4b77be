-- release: give back n = ARGV[3] tokens (1..L) of an admission another limit refused right
-- after: remove the newest entry of n tokens still in the window, if any.
-- Returns {1, 0, µs until the state no longer matters}.
local n = x
if n < 1 or n > L then return redis.error_reply('ERR tower-throttle: bad arguments') end
for i = #xs, 1, -1 do
  if ns[i] == n and xs[i] <= now then
    redis.call('ZREM', log, ms[i])
    table.remove(xs, i)
    table.remove(ns, i)
    table.remove(ms, i)
    total = total - n
    save()
    break
  end
end
return {1, 0, horizon() - now}
