-- File one index member among the dry-run records as its RQ job's meta says (or take it out):
-- the upgrade from a layout without them (jobttl.core.store.upgrade), and the resync's repair.
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.DryRunFile; the prelude is above this text.
-- Answers 1 if it is a dry-run record.
local due = redis.call('ZSCORE', index, member)
local meta = due and meta_of(redis.call('HGET', job_prefix .. string.format('%d', tonumber(due)), 'meta'))
local ref = meta and meta['ref']
if meta and meta['dryRun'] == true and type(ref) == 'table' and type(ref[2]) == 'string' then
  mark_dry(dry_kinds, type(ref[1]) == 'string' and ref[1] or '', ref[2], member, tonumber(due))
  return 1
end
undry(dry_kinds, member)
return 0
