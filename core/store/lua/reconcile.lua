-- Reconcile one decision about one member (a UID, or a UID's pods stage) with the schedule,
-- atomically, on Redis's clock. Its KEYS and ARGV are locals named by its wrapper,
-- jobttl.core.store.scripts.Reconcile (read it for what each holds); the prelude is above this text.
--
-- What it decides is Python's: the due time (`due`, from jobttl.core.domain.decisions.due.due_at) or why there
-- is none (`reason`), and how news is guarded (jobttl.core.store.guard). It compares that with what
-- is pending, and writes what needs no RQ job: a cancellation, a hold, the history card. A
-- booking it only answers ('schedule'): the store writes the RQ job and COMMIT in one MULTI, so
-- the index never names an RQ job that does not exist yet.
local now, stamp = clock()

local function job_key(at) return job_prefix .. uid .. '-' .. string.format('%d', at) end

local function settle(raw)
  -- A decision that changes nothing: kept on the card once, not appended to the trail. What
  -- jobttl did last (deleted it, is deleting it) is not overwritten by what events say after.
  if not raw then return end
  local decision, current = cjson.decode(raw), card_get(card, uid)
  if TERMINAL[current['event']] then return end
  for k in pairs(DECISION) do
    if decision[k] ~= current[k] then
      note(card, card_ttl, uid, decision['kind'] or '', decision['apiVersion'] or '', decision, stamp, false)
      return
    end
  end
end

local function change(event, due_, previous, why)
  local entry = {'event', event}
  for _, part in ipairs(fields) do entry[#entry + 1] = part end
  if due_ then entry[#entry + 1] = 'due'; entry[#entry + 1] = string.format('%d', due_) end
  if previous then entry[#entry + 1] = 'previousDue'; entry[#entry + 1] = string.format('%d', previous) end
  if why then entry[#entry + 1] = 'reason'; entry[#entry + 1] = why end
  local id = append_audit(audit_stream, audit_max, entry)
  note(card, card_ttl, uid, field_of(entry, 'kind'), field_of(entry, 'apiVersion'), decision_of(entry), id, true)
end

local cur = redis.call('ZSCORE', index, member)
local state, meta = false, nil
if cur then
  cur = tonumber(cur)
  local row = redis.call('HMGET', job_key(cur), 'status', 'meta')
  state, meta = row[1], meta_of(row[2])
end

local function result(what, due_, why, said)
  local reply = {what, due_ and string.format('%d', due_) or '', cur and string.format('%d', cur) or '', state or '',
                 string.format('%.3f', now), why or ''}
  if said then reply[7], reply[8] = said[1] or '', said[2] or '' end
  return reply
end

local function warn()
  -- An invalid TTL is told to the job's owner once per object and value: when it was told
  -- already, the card's latest decision for this UID (read before this call rewrites it) is this
  -- very one (reason and detail), recorded as skipped or as the cancellation of a deletion that
  -- was pending. A changed value has another detail; a fixed one is no invalid TTL. The memory
  -- is the card, bounded as the card is: once it expires, a value still wrong is told again.
  local current = card_get(card, uid)
  if TERMINAL[current['event']] then return end
  if current['reason'] == reason and current['detail'] == cjson.decode(unbooked)['detail'] then return end
  redis.call('ZADD', outbox, 'NX', now, invalid)
  -- The audit trail says it too, as often as the Warning is told (the notifier reads `invalid-ttl`).
  local entry = {'event', 'invalid-ttl'}
  for _, part in ipairs(fields) do entry[#entry + 1] = part end
  append_audit(audit_stream, audit_max, entry)
end

if expiring then
  -- jobttl already deleted this very object (a late or repeated event, a stale resync list).
  if redis.call('EXISTS', tombstone) == 1 then return result('ignored', nil, 'already-deleted') end
  local stage = string.match(member, '^(%a+):') or 'job'
  local said = redis.call('HMGET', override, 'keep', 'until', 'done:' .. stage)
  if said[3] then
    -- This stage ran for good (FINISH's `done`): nothing to book again.
    if not cur then return result('ignored') end
    redis.call('ZREM', index, member)
    undry(dry_kinds, member)
    unfile_namespace(namespaces, member)
    change('cancelled', nil, cur, 'done')
    return result('cancelled', nil, 'done')
  end
  if (said[1] or '') ~= keep_seen or (said[2] or '') ~= until_seen then
    -- An operator said something `due` was not decided with: nothing is written, and the
    -- store decides again with what they said.
    return result('override', nil, nil, said)
  end
  if keep_for then redis.call('EXPIRE', override, keep_for) end  -- a keep lasts while it is read
end

if not due then
  -- Not to be deleted: the decision's verdict, the object gone, or an operator's keep.
  if invalid then warn() end
  if not cur then settle(unbooked); return result('ignored') end
  -- The object is going away while its deletion runs: most likely that deletion's own echo
  -- (the watch reports the deletionTimestamp, then the removal, before the worker has
  -- recorded it). The running job re-reads the object and records the outcome itself.
  if echo and state == 'started' then return result('running', cur) end
  redis.call('ZREM', index, member)
  undry(dry_kinds, member)
  unfile_namespace(namespaces, member)
  change('cancelled', nil, cur, reason)
  return result('cancelled', nil, reason)
end

if cur == due then
  if state == 'started' then return result('running', due) end
  local same_mode = meta ~= nil and (meta['dryRun'] == true) == dry_run
  if same_mode and (state == 'scheduled' or state == 'queued' or state == 'deferred'
      or (state == 'failed' and meta['permanentFailure'] == true)
      or (dry_run and type(meta['wouldDeleteAt']) == 'number')) then
    return result('unchanged', due)
  end
end

-- News for the guard: jobttl.core.store.guard.is_news is this comparison's specification (one table
-- runs through both: tests/core/test_lua_reconcile.py). A dry-run record, or an index entry
-- whose RQ job is gone, is not a deletion on its way: it faces the guard like any other.
local booked = meta ~= nil and meta['dryRun'] ~= true
local already = cur and cur <= now and booked
local newly = due <= now and not already
local pulled = cur and due < cur and due <= now + news_horizon and cur > now + news_horizon
if (newly or pulled) and not dry_run then
  if collect then return result('due-now', due) end
  if burst_limit then
    -- The burst guard's mechanism: a sliding window of the members that came due.
    redis.call('ZREMRANGEBYSCORE', recent, '-inf', now - burst_window)
    if redis.call('ZCARD', recent) >= burst_limit then
      redis.call('HSET', held, member, held_entry)
      change('held', due, cur, 'burst')
      return result('held', due)
    end
    redis.call('ZADD', recent, now, member)
  end
end

return result('schedule', due)
