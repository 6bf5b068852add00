-- Record a booking RECONCILE answered 'schedule' for, in the same MULTI as RQ's write of its job.
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.Commit; the prelude is above this text.
-- Answers 'unchanged' if a concurrent reconcile committed the same, 'kept' if an operator said
-- keep since RECONCILE read the override (the RQ job then finds itself superseded).
local cur = redis.call('ZSCORE', index, member)
if cur then cur = tonumber(cur) end
local shown = cur and string.format('%d', cur) or ''
local due_text = string.format('%d', due)
if redis.call('HGET', override, 'keep') == 'true' then return {'kept', due_text, shown} end
-- Even when a concurrent reconcile committed the same due time: the RQ job of that time is
-- the one written in this MULTI, whose meta says dry run or not.
if dry_run then
  mark_dry(dry_kinds, field_of(fields, 'apiVersion'), field_of(fields, 'kind'), member, due)
else
  undry(dry_kinds, member)
end
-- The namespace index follows the index (filed again when a concurrent reconcile committed it).
file_namespace(namespaces, member, namespace, due)
if cur ~= seen and cur == due then return {'unchanged', due_text, shown} end
redis.call('ZADD', index, due, member)
local event = (cur and cur ~= due) and 'moved' or 'scheduled'
local entry = {'event', event}
for _, part in ipairs(fields) do entry[#entry + 1] = part end
entry[#entry + 1] = 'due'; entry[#entry + 1] = due_text
if cur then entry[#entry + 1] = 'previousDue'; entry[#entry + 1] = shown end
local id = append_audit(audit_stream, audit_max, entry)
-- The card outlives the deletion it announces: what is pending for weeks stays findable.
local now = clock()
local ttl = math.max(card_ttl, math.ceil(due - now) + card_ttl)
note(card, ttl, uid, field_of(entry, 'kind'), field_of(entry, 'apiVersion'), decision_of(entry), id, true)
return {event, due_text, shown}
