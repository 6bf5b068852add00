-- File one member among the dry-run records and in the namespace index as its RQ job's meta says
-- (or take it out of both): the upgrade from a layout without them (jobttl.core.store.upgrade), and
-- the resync's repair. KEYS and ARGV: locals named by jobttl.core.store.scripts.DryRunFile; the
-- prelude is above this text. Answers 1 if it is a dry-run record.
local due = redis.call('ZSCORE', index, member)
local meta = due and meta_of(redis.call('HGET', job_prefix .. string.format('%d', tonumber(due)), 'meta'))
local ref = meta and meta['ref']
if type(ref) == 'table' and type(ref[3]) == 'string' and ref[3] ~= '' then
  file_namespace(namespaces, member, ref[3], tonumber(due))
else
  -- Not in the index, or no record to say where: in no namespace (a listing shows it with none).
  unfile_namespace(namespaces, member)
end
-- A member found in a namespace's set it is not filed in (a hand edit, an older process's write).
if seen_in and redis.call('HGET', namespaces, member) ~= seen_in then
  redis.call('ZREM', namespaces .. ':' .. seen_in, member)
end
if meta and meta['dryRun'] == true and type(ref) == 'table' and type(ref[2]) == 'string' then
  mark_dry(dry_kinds, type(ref[1]) == 'string' and ref[1] or '', ref[2], member, tonumber(due))
  return 1
end
undry(dry_kinds, member)
return 0
