-- release: give back n = ARGV[3] tokens (1..L) of an admission that was not used: the one
-- booked for the instant ARGV[8] (when > 0: a waiter that went away before it), else one
-- made now (another limit refused it right after). Only from a window the state still
-- keeps (nothing once that window is over), never below empty; a booking's turn goes to
-- the next request (the sliding window's latest booking becomes the latest one left). The
-- ramp after a pause keeps the place it gave: a release never lets the restart go faster.
-- Returns {1, 0, µs until the state no longer matters}.
local n = x
if n < 1 or n > L then return redis.error_reply('ERR tower-throttle: bad arguments') end
local v = cw
if book > 0 then v = math.floor(book / W) end
if refund(v, n, book) then save() end
return {1, 0, horizon() - now}
