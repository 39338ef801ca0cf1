-- Gives back one token that lab 07's bucket.lua took: the request it was
-- taken for was refused for want of a slot (see router.Refunder).
--
-- KEYS[1]  the bucket, bucket.lua's hash {tokens, ts}
-- KEYS[2]  this refund's marker, so that a call the client library resends
--          after a lost reply is applied once
-- ARGV[1]  burst, the bucket's size
--
-- The stored tokens are the count at ts; one more at ts is one more from
-- then on, and bucket.lua's refill caps it at burst. An absent bucket reads
-- as full: there is nothing to give back. Returns 1 if a token went back.
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', 60000) then
  return 0
end
local tokens = tonumber(redis.call('HGET', KEYS[1], 'tokens'))
if tokens == nil then
  return 0
end
local burst = tonumber(ARGV[1])
redis.call('HSET', KEYS[1], 'tokens', string.format('%.17g', math.min(burst, tokens + 1)))
return 1
