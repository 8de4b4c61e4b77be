
-- pause: hold every admission for d = ARGV[3] µs (at most P), then restart from an empty
-- bucket whose first token is due when the pause ends. A shorter pause never shortens a
-- longer one. Returns {1, µs until the pause ends, µs until the bucket is full again}.
local d = x
if d > P then d = P end
if now + d > pause then pause = now + d end
local floor = pause + tau - T
if tat < floor then tat = floor end
save(tat, pause)
return {1, pause - now, full_in(tat)}
