-- A tenant's requests in flight across replicas: a sorted set of lease ids
-- scored by the time each lease expires, on Redis' own clock. A replica
-- that crashes never releases its leases; they expire by themselves.
--
-- KEYS[1]  the lease set
-- KEYS[2]  the ids cancelled: acquires their callers gave up on, scored by
--          when that is forgotten
-- ARGV[1]  'acquire', 'renew', 'release' or 'cancel'
-- ARGV[2]  lease id
-- ARGV[3]  acquire: max live leases; renew, cancel: lease TTL (ms)
-- ARGV[4]  acquire only: lease TTL (ms)
--
-- All four are idempotent per id, so a call that a client library resends
-- after a lost reply is not applied twice.
--
-- acquire returns {acquired (0|1), free slots left, 0}
-- renew returns {renewed (0|1), 0, 0}
-- release and cancel return {released (0|1), 0, 0}
if ARGV[1] == 'release' then
  return {redis.call('ZREM', KEYS[1], ARGV[2]), 0, 0}
end

local id = ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

if ARGV[1] == 'cancel' then
  -- ARGV: 'cancel', id, ttl. The release of an acquire whose caller gave
  -- up (a stalled Redis): it may run before that acquire does — they are
  -- on different connections — so the id is remembered for a lease's
  -- lifetime, and an acquire of it that runs later takes nothing.
  local ttl = tonumber(ARGV[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)
  redis.call('ZADD', KEYS[2], now + ttl, id)
  local last = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[2], tonumber(last[2]) - now)
  return {redis.call('ZREM', KEYS[1], id), 0, 0}
end

if ARGV[1] == 'renew' then
  -- ARGV: 'renew', id, ttl. A live lease lives ttl more from now; one
  -- released or already expired is not brought back.
  local ttl = tonumber(ARGV[3])
  local expiry = tonumber(redis.call('ZSCORE', KEYS[1], id))
  if expiry == nil or expiry <= now then
    redis.call('ZREM', KEYS[1], id)
    return {0, 0, 0}
  end
  redis.call('ZADD', KEYS[1], 'XX', now + ttl, id)
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], tonumber(last[2]) - now)
  return {1, 0, 0}
end

local max = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])

local cancelled = redis.call('ZSCORE', KEYS[2], id)
if cancelled and tonumber(cancelled) > now then
  return {0, 0, 0} -- its caller gave up on it, and said so first
end

-- A lease lives exactly ttl: at its expiry instant it no longer counts.
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local live = redis.call('ZCARD', KEYS[1])
if redis.call('ZSCORE', KEYS[1], id) then
  return {1, math.max(0, max - live), 0} -- a retried call: acquired already
end
if live >= max then
  return {0, 0, 0}
end
redis.call('ZADD', KEYS[1], now + ttl, id)
-- The set expires with its last lease (the highest score, even if the
-- clock stepped back since an earlier lease was written).
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
redis.call('PEXPIRE', KEYS[1], tonumber(last[2]) - now)
return {1, max - live - 1, 0}
