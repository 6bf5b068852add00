-- Reserve the next free slot on the deletions' shared timeline (the generic cell rate algorithm:
-- one key holding the "theoretical arrival time"), on Redis's clock (jobttl.core.store.ratelimit).
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.ReserveSlot. Answers how many microseconds
-- the caller must wait before its slot.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local tat = tonumber(redis.call('GET', timeline) or now)
if tat < now then tat = now end
redis.call('SET', timeline, tat + interval, 'PX', math.ceil((tat - now + interval) / 1000) + 1000)
return tat - now
