-- Claim up to `batch` deleted objects due for another look (jobttl.worker.follow): each is left
-- alone by the other workers for `lease` seconds. Answers the members claimed.
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.ClaimFollowUps.
local due = redis.call('ZRANGEBYSCORE', terminating, '-inf', now, 'LIMIT', 0, batch)
for _, member in ipairs(due) do redis.call('ZADD', terminating, now + lease, member) end
return due
