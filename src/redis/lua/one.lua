-- A script of one quota: `algo` its algorithm's functions, TAG its state's tag; its state
-- at KEYS[1] (and KEYS[2]), its arguments from ARGV[1].
local q = quota(KEYS, 0, TAG)
if not q then return redis.error_reply('ERR tower-throttle: bad arguments') end
algo.load(q)
