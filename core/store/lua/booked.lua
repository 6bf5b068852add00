-- A booking, after RQ's own write of its job in the same MULTI: the job leaves the finished and
-- failed registries an earlier run of the same id left it in, loses the fields this write left
-- out (RQ's '' would have overwritten that run's values), and is kept until it runs; and the
-- change goes to the notices outbox, if it is to be announced. One command instead of five.
-- Only a job still as booked is tidied: should this run apart from RQ's write (`execute`, after
-- Redis lost its scripts), a job that has run since keeps its registry and its expiry.
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.Booked.
if redis.call('HGET', job, 'status') == status then
  redis.call('ZREM', finished, job_id)
  redis.call('ZREM', failed, job_id)
  if #omitted > 0 then redis.call('HDEL', job, unpack(omitted)) end
  redis.call('PERSIST', job)
end
if notice then redis.call('ZADD', outbox, 'NX', notice_at, notice) end
return 1
