-- When a resync an event asked for may run, on Redis's clock: at most one per `min_interval`
-- seconds. KEYS and ARGV: locals named by jobttl.core.store.scripts.ResyncSlot.
-- `next` holds when the latest such resync runs (epoch seconds); it expires `min_interval` after.
-- Answers {'now', at}: run one now; {'deferred', at}: the last one ran less than `min_interval`
-- ago, one is booked for `at`; {'coalesced', at}: one is already booked for `at`, later than now.
local now = tonumber(redis.call('TIME')[1])
local latest = tonumber(redis.call('GET', next) or '')
if latest and latest > now then return {'coalesced', latest} end
local at = now
if latest and now < latest + min_interval then at = latest + min_interval end
if min_interval > 0 then redis.call('SET', next, at, 'EXAT', at + min_interval) end
return {at == now and 'now' or 'deferred', at}
