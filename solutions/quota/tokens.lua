-- A tenant's token quota: a bucket refilled on Redis' own clock, and the
-- set of reservations not yet settled. Reserve and settle each run as one
-- atomic step, so parallel requests from any number of replicas see each
-- other's reservations.
--
-- Exact integer arithmetic: one token is 60000 units, and the bucket
-- refills perMinute units per millisecond (perMinute tokens per 60000 ms).
-- Every quantity is a whole number of units below 2^53, which Lua's
-- doubles hold exactly, so rounding never drifts.
--
-- KEYS[1]  the bucket, a hash {tokens (units), ts (ms)}; absent = full
-- KEYS[2]  open reservations, a sorted set of ids scored by reserve time (ms)
-- ARGV[1]  'reserve' or 'settle'
-- ARGV[2]  perMinute, the bucket's capacity in tokens
-- ARGV[3]  reservation id
-- ARGV[4]  estimate (tokens)
-- ARGV[5]  settle window (ms): a reservation older than this stays charged
-- ARGV[6]  debt (minutes of quota): how far below zero usage may take it
-- ARGV[7]  settle only: actual usage (tokens)
--
-- Both are idempotent per id, so a call that a client library resends after
-- a lost reply is not applied twice. And their order does not matter: a
-- settle that finds no reservation leaves a marker ("settled:" .. id) in
-- the set, so a reserve that arrives after it — one a stalled Redis runs
-- late, after the undo sent on another connection — takes nothing.
--
-- reserve returns {allowed (0|1), whole tokens remaining, retry after (ms)}
-- settle  returns {applied (0|1), whole tokens remaining, 0}
local UNIT = 60000
local per = tonumber(ARGV[2])
local cap = per * UNIT
local id = ARGV[3]
local estimate = tonumber(ARGV[4]) * UNIT
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
  local ttl = math.ceil((cap - tokens) / per) + math.max(0, ts - now)
  redis.call('PEXPIRE', KEYS[1], ttl)
end

local function remaining()
  return math.max(0, math.floor(tokens / UNIT))
end

if ARGV[1] == 'reserve' then
  if redis.call('ZSCORE', KEYS[2], id) or redis.call('ZSCORE', KEYS[2], 'settled:' .. id) then
    return {1, remaining(), 0} -- a retried call (reserved already), or one settled before it ran
  end
  if tokens < estimate then
    store() -- keep the refill; take nothing
    -- Rounded up, never down; plus any wait for a clock that stepped back.
    return {0, remaining(), math.ceil((estimate - tokens) / per) + math.max(0, ts - now)}
  end
  tokens = tokens - estimate
  store()
  -- Open the reservation; forget those older than the window first.
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  redis.call('ZADD', KEYS[2], now, id)
  local newest = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[2], tonumber(newest[2]) + window - now)
  return {1, remaining(), 0}
end

-- settle: only an open reservation within its window is applied, once.
local opened = tonumber(redis.call('ZSCORE', KEYS[2], id))
if opened == nil then
  -- Settled before, or not opened yet: mark it settled for the window, so
  -- that a reserve that arrives late takes nothing.
  redis.call('ZADD', KEYS[2], now, 'settled:' .. id)
  if redis.call('PTTL', KEYS[2]) < window then
    redis.call('PEXPIRE', KEYS[2], window)
  end
  return {0, remaining(), 0}
end
redis.call('ZREM', KEYS[2], id)
if opened <= now - window then
  return {0, remaining(), 0} -- too late: it stays charged its estimate
end
local actual = tonumber(ARGV[7]) * UNIT
tokens = math.max(floor, math.min(cap, tokens + estimate - actual))
store()
return {1, remaining(), 0}
