-- Priority classes across processes (acquire, pause). ARGV[10] = 0: none; else
-- c + 4·(w1 + 1024·(w2 + 1024·w3)), the request's class c (1 critical, 2 normal,
-- 3 background) and each class's weight (1..1000). A request that goes later than now (a
-- booking) takes a place within its class's share of the booking horizon's tokens (of the
-- first quota) and of the bookings ahead, shared by weight among the classes with bookings
-- ahead or with a waiter refused of late; going now needs no share. The last two keys keep
-- the account: `<key>:classes`, "<a1>:<a2>:<a3>:<u1>:<u2>:<u3>:<seq>:<last>" (each class's
-- tokens booked ahead, the instant until which it counts as waiting, a counter, the latest
-- booking), and `<key>:booked`, the bookings ahead (score = instant, member =
-- "<c>:<n>:<seq>").
local ranked = nil
do
  local code = back
  if code ~= math.floor(code) or code >= 2^32 then
    return redis.error_reply('ERR tower-throttle: bad arguments')
  elseif code >= 4 then
    local c, rest = code % 4, math.floor(code / 4)
    local w = {rest % 1024, math.floor(rest / 1024) % 1024, math.floor(rest / 1048576)}
    local bad = c < 1
    for k = 1, 3 do bad = bad or w[k] < 1 or w[k] > 1000 end
    if bad then return redis.error_reply('ERR tower-throttle: bad arguments') end
    ranked = {c = c, w = w, account = KEYS[#KEYS - 1], booked = KEYS[#KEYS]}
  elseif code ~= 0 then
    return redis.error_reply('ERR tower-throttle: bad arguments')
  end
end
-- The account as of now, the bookings that passed taken off; garbage reads as none, and no
-- class counts more than `room` nor waits longer than two horizons.
local function account(room, ahead)
  local s = {}
  local raw = redis.call('GET', ranked.account)
  for v in string.gmatch(raw or '', '%d+') do s[#s + 1] = tonumber(v) end
  if #s ~= 8 then
    s = {0, 0, 0, 0, 0, 0, 0, 0}
    redis.call('DEL', ranked.booked)
  end
  local t = redis.call('TYPE', ranked.booked)['ok']
  if t ~= 'zset' and t ~= 'none' then redis.call('DEL', ranked.booked) end
  local passed = redis.call('ZRANGEBYSCORE', ranked.booked, '-inf', fmt(now))
  for _, m in ipairs(passed) do
    local c, n = string.match(m, '^(%d):(%d+):')
    c, n = tonumber(c), tonumber(n)
    if c and c >= 1 and c <= 3 then s[c] = s[c] - n end
  end
  if #passed > 0 then redis.call('ZREMRANGEBYSCORE', ranked.booked, '-inf', fmt(now)) end
  for k = 1, 3 do
    s[k] = math.min(math.max(s[k], 0), room)
    s[3 + k] = math.min(s[3 + k], now + 2 * ahead + 50000)
  end
  s[7], s[8] = s[7] % 1000000000, math.min(s[8], now + ahead)
  return s
end
-- Written to last until the latest booking, or the last class counted as waiting.
local function save(s, horizon)
  s[8] = math.max(s[8], horizon)
  local until_ = math.max(s[4], s[5], s[6], s[8])
  local v = string.format('%d:%d:%d:%d:%d:%d:%d:%d', s[1], s[2], s[3], s[4], s[5], s[6], s[7],
    s[8])
  redis.call('SET', ranked.account, v, 'PX', fmt(ttl_ms(until_)))
  redis.call('PEXPIRE', ranked.booked, fmt(ttl_ms(until_)))
end
-- Whether n tokens, going at `at`, may take their place (`ahead`: the booking horizon, T:
-- the first quota's interval): nil when they may (counted to the class), else the wait
-- until the class's share should have room.
local function refused_share(n, at, ahead, T)
  if not ranked or book ~= 1 or at <= now or n == 0 then return nil end
  local room = math.max(1, math.floor(ahead / T))
  local s, c, w = account(room, ahead), ranked.c, ranked.w
  -- Its share of the room, and no more ahead, for its weight, than any class waiting
  -- beside it (one request over, so that each may grow): the classes' bookings ahead stay
  -- in the ratio of the weights, and so do the admissions, whose bookings pass at one pace.
  local weights, least, ahead_all = w[c], nil, s[1] + s[2] + s[3]
  for k = 1, 3 do
    if k ~= c and (s[k] > 0 or s[3 + k] > now) then
      weights = weights + w[k]
      least = math.min(least or math.huge, (s[k] + n) / w[k])
    end
  end
  local share = math.max(n, math.floor(room * w[c] / weights))
  if s[c] + n <= share and (not least or (s[c] + n) / w[c] <= least) then
    s[c], s[7] = s[c] + n, s[7] + 1
    redis.call('ZADD', ranked.booked, fmt(at), string.format('%d:%d:%d', c, n, s[7]))
    save(s, at)
    return nil
  end
  -- Until enough of its own bookings pass: at its share of the rate, or one of them, at
  -- the pace the bookings ahead pass.
  local wait = math.max((s[c] + n - share) * T * weights / w[c], T * ahead_all / math.max(s[c], 1))
  wait = math.min(math.max(math.ceil(wait), 1000), ahead)
  s[3 + c] = math.max(s[3 + c], now + math.min(2 * wait, ahead) + 50000)
  save(s, now)
  return wait
end
-- A booking refused by the limit, for `wait`: its class counts as waiting until it asks
-- again, so the others leave its share of the horizon free.
local function wanted(wait, ahead, T)
  if not ranked or book ~= 1 then return end
  local s = account(math.max(1, math.floor(ahead / T)), ahead)
  local c = ranked.c
  s[3 + c] = math.max(s[3 + c], now + math.min(wait + ahead, 2 * ahead) + 50000)
  save(s, now)
end
-- A pause voids every booking: the account goes with them.
local function forget_ranks()
  if ranked then redis.call('DEL', ranked.account, ranked.booked) end
end
