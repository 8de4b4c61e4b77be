-- release: give back n = ARGV[3] tokens (0..cap; 0: nothing) of an admission that was not used: the one
-- booked for the instant ARGV[8] (when > 0: a waiter that went away before it), else one
-- made now (another limit refused it right after). See each algorithm's `give`.
-- Returns {1, 0, µs until the state no longer matters}.
local n = x
if n == 0 then return {1, 0, algo.later(q) - now} end
if n < 1 or n > q.cap then return redis.error_reply('ERR tower-throttle: bad arguments') end
algo.give(q, n, book)
return {1, 0, algo.later(q) - now}
