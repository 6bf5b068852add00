-- Retire an RQ job a reconcile replaced or dropped, unless the index names it again by now (a
-- concurrent reconcile booked the same job) or a worker runs it (it decides for itself). RQ's
-- own delete reads the job's status first and so cannot be made conditional in a MULTI; this
-- removes the job from where RQ keeps it (keys named by RQ's classes), no more.
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.Retire. Answers 1 if retired.
local cur = redis.call('ZSCORE', index, member)
if cur and tonumber(cur) == due then return 0 end
if redis.call('HGET', job, 'status') == 'started' then return 0 end
for _, registry in ipairs({scheduled, finished, failed, deferred}) do redis.call('ZREM', registry, job_id) end
redis.call('LREM', queue, 0, job_id)
redis.call('DEL', job, dependents, dependencies, results)
return 1
