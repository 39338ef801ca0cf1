-- Token bucket: refill and consume in one atomic step, on Redis' own clock.
-- KEYS[1]  the bucket (a hash: tokens, ts)
-- ARGV[1]  rate, tokens per second
-- ARGV[2]  burst, the bucket's size
-- Returns {allowed (0|1), whole tokens remaining, retry after (microseconds)}.
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
  tokens = burst -- a new bucket starts full
  ts = now
end
if now > ts then -- never refill backwards
  tokens = math.min(burst, tokens + (now - ts) * rate / 1000000)
  ts = now
end

local allowed = 0
local retry_us = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
else
  retry_us = math.ceil((1 - tokens) * 1000000 / rate)
end

redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', tokens), 'ts', string.format('%d', ts))
-- Expire once the bucket would be full again: an absent bucket reads as full.
local full_ms = math.ceil((burst - tokens) * 1000 / rate)
if full_ms < 1 then full_ms = 1 end
redis.call('PEXPIRE', KEYS[1], full_ms)

return {allowed, math.floor(tokens), retry_us}
