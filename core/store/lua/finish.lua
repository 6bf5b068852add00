-- The worker, after deciding: record the outcome (deleted, delete-requested, would-delete, ...)
-- in one write: the index, the audit entry, the history card, the tombstone, the follow-up, a
-- stage done for good; the claim and the intent end with it. Answers the audit entry's id.
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.Finish; the prelude is above this text.
if forget and tonumber(redis.call('ZSCORE', index, member) or '-1') == due then
  redis.call('ZREM', index, member)
  undry(dry_kinds, member)
  unfile_namespace(namespaces, member)
end
if forget and stages_too and member == uid then
  -- The job itself is going: its pods stage goes with it (its RQ job finds itself superseded).
  redis.call('ZREM', index, 'pods:' .. uid)
  undry(dry_kinds, 'pods:' .. uid)
  unfile_namespace(namespaces, 'pods:' .. uid)
end
if done then
  -- A stage that ran for good: RECONCILE never books it again (see its done:<stage> check).
  redis.call('HSET', override, 'done:' .. done, string.format('%d', tonumber(redis.call('TIME')[1])))
  redis.call('EXPIRE', override, override_ttl)
end
local id = append_audit(audit_stream, audit_max, entry)
note(card, card_ttl, uid, field_of(entry, 'kind'), field_of(entry, 'apiVersion'), decision_of(entry), id, true)
if tombstone_entry then redis.call('SET', tombstone, tombstone_entry, 'EX', tombstone_ttl) end
if follow_at then
  redis.call('HSET', terminating_info, member, follow_info or '')
  redis.call('ZADD', terminating, follow_at, member)
else
  redis.call('ZREM', terminating, member)
  redis.call('HDEL', terminating_info, member)
end
redis.call('DEL', claim, intent)
return id
