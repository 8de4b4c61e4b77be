-- lease (token bucket): give back ARGV[10] unused tokens of an expired lease, then take up
-- to ARGV[3] tokens that fit now, at least ARGV[9] (`lua/gcra/lease.lua`).
return algo.lease(q, x, need, back)
