-- The worker, before deleting: is this RQ job still the pending deletion, what did operators
-- say, and is another run of it already at work? Run when a deletion starts (a claim is taken)
-- and again right before its DELETE (the intent to delete is written, so a run that dies after
-- its DELETE is recorded as a deletion by the next one, not as a cancellation). No intent is
-- written for a job an operator keeps: the worker decides again before any DELETE.
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.Begin.
local due = redis.call('ZSCORE', index, member)
local t = redis.call('TIME')
local said = redis.call('HMGET', override, 'keep', 'until')
local claimed = redis.call('GET', claim)
local busy = ''
if claimed and claimed ~= token then
  busy = 'busy'
elseif step == 'start' then
  redis.call('SET', claim, token, 'EX', claim_seconds)
elseif due and said[1] ~= 'true' then
  redis.call('SET', intent, intent_entry, 'EX', 86400)
end
return {due or '', t[1], t[2], said[1] or '', said[2] or '', redis.call('GET', intent) or '', busy}
