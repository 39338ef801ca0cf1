-- A tenant's token quota: a bucket refilled on Redis' own clock, and the
-- reservations not yet settled. Reserve and settle each run as one atomic
-- step, so parallel requests on any number of replicas see each other.
--
-- Exact integer arithmetic: one token is 60000 units, and the bucket
-- refills perMinute units per millisecond (perMinute tokens per 60000 ms).
-- Every quantity is a whole number of units below 2^53, which Lua's
-- doubles hold exactly, so rounding never drifts.
--
-- KEYS[1]  the bucket, a hash {tokens (units), ts (ms)}; absent = full
-- KEYS[2]  open reservations, a sorted set of "open:" .. id scored by
--          reserve time (ms), and of "settled:" .. id markers scored by
--          settle time: each under its own prefix, so no id can be taken
--          for another's marker
-- KEYS[3]  each open reservation's estimate, a hash id -> tokens
-- ARGV[1]  'reserve' or 'settle'
-- ARGV[2]  perMinute, the bucket's capacity in tokens
-- ARGV[3]  reservation id
-- ARGV[4]  reserve: the estimate; settle: the tokens used
-- ARGV[5]  settle window (ms): a reservation this old or older stays charged
-- ARGV[6]  debt (minutes of quota): how far below zero usage may take it
--
-- reserve returns {allowed (0|1), whole tokens remaining, retry after (ms)}
-- settle  returns {applied (0|1), whole tokens remaining, 0}
local UNIT = 60000
local per = tonumber(ARGV[2])
local cap = per * UNIT
local id = ARGV[3]
local window = tonumber(ARGV[5])
local floor = -cap * tonumber(ARGV[6])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- Load and refill. A quota lowered since the last call clamps the bucket
-- to the new bounds: at most full, at most the debt allowed below zero.
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = cap
  ts = now
end
tokens = math.max(floor, math.min(cap, tokens))
if now > ts then -- a clock that stepped back refills nothing
  if (now - ts) * per >= cap - tokens then
    tokens = cap
  else
    tokens = tokens + (now - ts) * per
  end
  ts = now
end

local function store()
  if tokens >= cap then
    redis.call('DEL', KEYS[1]) -- absent reads as full
    return
  end
  redis.call('HSET', KEYS[1], 'tokens', string.format('%d', tokens), 'ts', string.format('%d', ts))
  -- Expire when the bucket would be full again (later if the clock
  -- stepped back and refill waits for it to pass ts).
  redis.call('PEXPIRE', KEYS[1], math.ceil((cap - tokens) / per) + math.max(0, ts - now))
end

local function remaining()
  return math.max(0, math.floor(tokens / UNIT))
end

-- Forget reservations and markers a window old or older, and keep the
-- two keys a window past their newest entry.
local function tidy()
  local old = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now - window)
  for _, member in ipairs(old) do
    redis.call('HDEL', KEYS[3], (string.gsub(member, '^%a+:', '', 1))) -- the id, without its prefix
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  for _, key in ipairs({KEYS[2], KEYS[3]}) do
    if redis.call('PTTL', key) < window then
      redis.call('PEXPIRE', key, window)
    end
  end
end

if ARGV[1] == 'reserve' then
  if redis.call('ZSCORE', KEYS[2], 'open:' .. id) or redis.call('ZSCORE', KEYS[2], 'settled:' .. id) then
    -- A call resent after a lost reply (reserved already), or one that a
    -- stalled Redis runs after its settle: either way, take nothing (but
    -- keep the bucket until it is full at this call's quota).
    store()
    return {1, remaining(), 0}
  end
  local estimate = tonumber(ARGV[4])
  if tokens < estimate * UNIT then
    store() -- keep the refill; take nothing
    -- Rounded up, never down; plus any wait for a clock that stepped back.
    return {0, remaining(), math.ceil((estimate * UNIT - tokens) / per) + math.max(0, ts - now)}
  end
  tokens = tokens - estimate * UNIT
  store()
  redis.call('ZADD', KEYS[2], now, 'open:' .. id)
  redis.call('HSET', KEYS[3], id, estimate)
  tidy()
  return {1, remaining(), 0}
end

-- settle: only an open reservation within its window is applied, and once.
local opened = tonumber(redis.call('ZSCORE', KEYS[2], 'open:' .. id))
local estimate = tonumber(redis.call('HGET', KEYS[3], id))
redis.call('ZREM', KEYS[2], 'open:' .. id)
redis.call('HDEL', KEYS[3], id)
-- Mark it settled, so that a reserve that arrives late takes nothing and
-- a settle resent after a lost reply applies nothing.
redis.call('ZADD', KEYS[2], now, 'settled:' .. id)
tidy()
if opened == nil or estimate == nil or opened <= now - window then
  store() -- nothing to apply, but the bucket is kept until full at this quota
  return {0, remaining(), 0} -- settled already, never opened, or too late: it stays charged its estimate
end
tokens = math.max(floor, math.min(cap, tokens + (estimate - tonumber(ARGV[4])) * UNIT))
store()
return {1, remaining(), 0}
