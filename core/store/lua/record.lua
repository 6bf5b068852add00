-- One audit entry recorded from Python (an operator's action, a failure): the trail and, for
-- an entry about a job, its history card. Answers the entry's id.
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.Record; the prelude is above this text.
local id = append_audit(audit_stream, audit_max, entry)
if uid then
  note(card, card_ttl, uid, field_of(entry, 'kind'), field_of(entry, 'apiVersion'), decision_of(entry), id, true)
end
return id
