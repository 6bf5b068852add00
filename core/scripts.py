"""The Lua scripts jobttl runs inside Redis: each compares and writes atomically, in one round trip.

Why scripts: a reconcile must compare the decision with what is pending and then write the
index, the audit entry and the job's history without another process slipping in between.
A lock costs several round trips per event (SET, the reads, the writes, DEL) and serialises
the sink's threads on it; a script does the same in one, on Redis's own clock (``TIME``),
so the guard's and the schedule's notion of "now" never depends on a process's clock.

RQ's jobs are written by RQ's code (`Schedule.apply`); the scripts only read them, remove
one a reconcile replaced (RETIRE), or tidy one RQ has just written (BOOKED). The scripts
assume a single Redis (or a Sentinel-managed primary): they touch keys derived from their
arguments, which Redis Cluster does not allow.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis import Redis
from redis.client import Pipeline
from redis.exceptions import NoScriptError, RedisError

from jobttl.core import keys, logs
from jobttl.core.identity import JobRef

log = logging.getLogger("jobttl.scripts")

# Shared helpers, prepended to every script.
_PRELUDE = r"""
local function clock()
  local t = redis.call('TIME')
  local seconds, micros = tonumber(t[1]), tonumber(t[2])
  return seconds + micros / 1000000, string.format('%d-0', seconds * 1000 + math.floor(micros / 1000))
end

local function audit(stream, maxlen, fields)
  return redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', unpack(fields))
end

-- The job's history card (one hash per namespace/name): for each UID that had the name, its
-- latest decision and the ids of its audit entries, newest first.
local DECISION = {event = true, reason = true, detail = true, due = true}
local TERMINAL = {deleted = true, ['delete-requested'] = true, stuck = true}
local LOG_LENGTH = 20
local CARD_UIDS = 20  -- a name re-created daily keeps the latest this many UIDs

local function card_get(card, uid)
  local raw = redis.call('HGET', card, uid)
  if raw then
    local ok, value = pcall(cjson.decode, raw)
    if ok and type(value) == 'table' then return value end
  end
  return {}
end

local function forget_oldest(card)
  local oldest, at = nil, nil
  local fields = redis.call('HGETALL', card)
  for i = 1, #fields, 2 do
    local ok, value = pcall(cjson.decode, fields[i + 1])
    local when = ok and type(value) == 'table' and value['at'] or ''
    if oldest == nil or when < at then oldest, at = fields[i], when end
  end
  if oldest then redis.call('HDEL', card, oldest) end
end

local function note(card, ttl, uid, kind, api_version, decision, id, logged)
  local value = card_get(card, uid)
  if next(value) == nil and redis.call('HLEN', card) >= CARD_UIDS then forget_oldest(card) end
  for k in pairs(DECISION) do value[k] = decision[k] end
  -- The kind with its apiVersion: a batch/v1 Job and a Volcano Job may share a name.
  if kind ~= '' then value['kind'] = kind end
  if api_version ~= '' then value['apiVersion'] = api_version end
  value['at'] = id
  if logged then
    local log = value['log']
    if type(log) ~= 'table' then log = {} end
    table.insert(log, 1, id)
    while #log > LOG_LENGTH do table.remove(log) end
    value['log'] = log
  end
  redis.call('HSET', card, uid, cjson.encode(value))
  if redis.call('TTL', card) < ttl then redis.call('EXPIRE', card, ttl) end
end

local function decision_of(entry)
  local value = {}
  for i = 1, #entry, 2 do
    if DECISION[entry[i]] then value[entry[i]] = entry[i + 1] end
  end
  return value
end

local function field_of(entry, name, start)
  for i = start or 1, #entry, 2 do if entry[i] == name then return entry[i + 1] end end
  return ''
end

local function meta_of(raw)
  if not raw then return nil end
  local ok, meta = pcall(cjson.decode, raw)
  if ok and type(meta) == 'table' then return meta end
  return nil
end

-- The dry-run records beside the index: `kinds` (keys.DRY_RUN) lists the kinds, and a sorted
-- set per kind (kinds .. ':' .. kind) holds the index's dry-run members at the same due time.
-- Nothing that decides a deletion reads them: they let the gauges tell what dry run would
-- delete from what is overdue without reading a record. Every write of the index keeps them.
-- A kind is Kind.group (jobttl.core.kinds.group_kind): batch/v1 Job and Volcano's Job are two.
local function undry(kinds, member)
  for _, kind in ipairs(redis.call('SMEMBERS', kinds)) do redis.call('ZREM', kinds .. ':' .. kind, member) end
end

local function group_kind(api_version, kind)
  if kind == '' then kind = '?' end
  local group = string.match(api_version or '', '^(.*)/[^/]*$') or ''
  if group == '' then return kind end
  return kind .. '.' .. group
end

local function mark_dry(kinds, api_version, kind, member, due)
  kind = group_kind(api_version, kind)
  redis.call('SADD', kinds, kind)
  redis.call('ZADD', kinds .. ':' .. kind, due, member)
end
"""

# Reconcile one decision about one member (a UID, or a UID's pod stage) with the schedule.
#
# KEYS: pending index, override hash, audit stream, history card, held hash, the guard's
#       recent-newly-due set, the UID's tombstone, the notices outbox, the dry-run kinds
# ARGV: member, uid, verdict ("expires" or why not), expires_at, mode (guarded | collect |
#       release), burst limit (-1: none), RQ job key prefix of the stage ("rq:job:delete-"), dry run
#       ("1"/"0"), decision JSON for the card when nothing changes, held JSON, audit maxlen,
#       card TTL, echo ("1": the object is going away and someone other than its deletion's own
#       RQ job says so), the InvalidTTL notice for the outbox or "", then the audit entry's fields
#       as key, value, ...
# Returns: {change, due, previous due, previous RQ job status, Redis's now, reason} (empty
# strings for none); change "schedule" means: write the RQ job, with COMMIT, in one MULTI.
RECONCILE = _PRELUDE + r"""
local member, uid, verdict = ARGV[1], ARGV[2], ARGV[3]
local mode, limit, prefix, dry = ARGV[5], tonumber(ARGV[6]), ARGV[7], ARGV[8] == '1'
local decision, held, maxlen, ttl = ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[12])
local echo, invalid = ARGV[13] == '1', ARGV[14]
local now, stamp = clock()
local KEEP_SECONDS = 34560000  -- an operator's keep lasts 400 days past the last time it was read
local HORIZON = 3600  -- a deletion pulled in to within this of now is news for the guard too

local function job_key(due) return prefix .. uid .. '-' .. string.format('%d', due) end

local function settle(raw)
  -- A decision that changes nothing: kept on the card once, not appended to the trail. What
  -- jobttl did last (deleted it, is deleting it) is not overwritten by what events say after. "": nothing to keep.
  if raw == '' then return end
  local decision, current = cjson.decode(raw), card_get(KEYS[4], uid)
  if TERMINAL[current['event']] then return end
  for k in pairs(DECISION) do
    if decision[k] ~= current[k] then
      note(KEYS[4], ttl, uid, decision['kind'] or '', decision['apiVersion'] or '', decision, stamp, false)
      return
    end
  end
end

local function change(event, due, previous, reason)
  local entry = {'event', event}
  for i = 15, #ARGV do entry[#entry + 1] = ARGV[i] end
  if due then entry[#entry + 1] = 'due'; entry[#entry + 1] = string.format('%d', due) end
  if previous then entry[#entry + 1] = 'previousDue'; entry[#entry + 1] = string.format('%d', previous) end
  if reason then entry[#entry + 1] = 'reason'; entry[#entry + 1] = reason end
  local id = audit(KEYS[3], maxlen, entry)
  note(KEYS[4], ttl, uid, field_of(entry, 'kind'), field_of(entry, 'apiVersion'), decision_of(entry), id, true)
end

local cur = redis.call('ZSCORE', KEYS[1], member)
local state, meta = false, nil
if cur then
  cur = tonumber(cur)
  local row = redis.call('HMGET', job_key(cur), 'status', 'meta')
  state, meta = row[1], meta_of(row[2])
end
local function result(change_, due, reason)
  return {change_, due and string.format('%d', due) or '', cur and string.format('%d', cur) or '', state or '',
          string.format('%.3f', now), reason or ''}
end

local function warn()
  -- An invalid TTL is told to the job's owner once per object and value: when it was told
  -- already, the card's latest decision for this UID (read before this call rewrites it) is this
  -- very one (reason and detail), recorded as skipped or as the cancellation of a deletion that
  -- was pending. A changed value has another detail; a fixed one is no invalid TTL. The memory
  -- is the card, bounded as the card is: once it expires, a value still wrong is told again.
  local current = card_get(KEYS[4], uid)
  if TERMINAL[current['event']] then return end
  if current['reason'] == verdict and current['detail'] == cjson.decode(decision)['detail'] then return end
  redis.call('ZADD', KEYS[8], 'NX', now, invalid)
end

if verdict ~= 'expires' then
  if invalid ~= '' then warn() end
  if not cur then settle(decision); return result('ignored') end
  -- The object is going away while its deletion runs: most likely that deletion's own echo
  -- (the watch reports the deletionTimestamp, then the removal, before the worker has
  -- recorded it). The running job re-reads the object and records the outcome itself.
  if echo and state == 'started' then return result('running', cur) end
  redis.call('ZREM', KEYS[1], member)
  undry(KEYS[9], member)
  change('cancelled', nil, cur, verdict)
  return result('cancelled')
end

if redis.call('EXISTS', KEYS[7]) == 1 then
  -- jobttl already deleted this very object (a late or repeated event, a stale resync list).
  return result('ignored', nil, 'already-deleted')
end

local stage = string.match(member, '^(%a+):') or 'job'
local override = redis.call('HMGET', KEYS[2], 'keep', 'until', 'done:' .. stage)
if override[3] then
  -- This stage ran for good (Schedule.mark_done): nothing to book again.
  if not cur then return result('ignored') end
  redis.call('ZREM', KEYS[1], member)
  undry(KEYS[9], member)
  change('cancelled', nil, cur, 'done')
  return result('cancelled')
end
if override[1] == 'true' then
  redis.call('EXPIRE', KEYS[2], KEEP_SECONDS)  -- kept for good: the keep lasts while it is needed
  if not cur then
    settle(cjson.encode({event = 'skipped', reason = 'kept-by-operator', kind = field_of(ARGV, 'kind', 15),
                        apiVersion = field_of(ARGV, 'apiVersion', 15)}))
    return result('kept')
  end
  redis.call('ZREM', KEYS[1], member)
  undry(KEYS[9], member)
  change('cancelled', nil, cur, 'kept-by-operator')
  return result('cancelled')
end
local due = tonumber(ARGV[4])
if override[2] then due = math.max(due, tonumber(override[2])) end

if cur == due then
  if state == 'started' then return result('running', due) end
  local same_mode = meta ~= nil and (meta['dryRun'] == true) == dry
  if same_mode and (state == 'scheduled' or state == 'queued' or state == 'deferred'
      or (state == 'failed' and meta['permanentFailure'] == true)
      or (dry and type(meta['wouldDeleteAt']) == 'number')) then
    return result('unchanged', due)
  end
end

-- News for the guard: due now and not already due in the schedule, or pulled in to within the
-- horizon from further away (a mistyped maxTTL). A dry-run record, or an index entry whose RQ
-- job is gone, is not a deletion on its way: it faces the guard like any other.
local already = cur and cur <= now and meta ~= nil and meta['dryRun'] ~= true
local newly = due <= now and not already
local pulled = cur and due < cur and due <= now + HORIZON and cur > now + HORIZON
if (newly or pulled) and not dry then
  if mode == 'collect' then return result('due-now', due) end
  if mode == 'guarded' and limit >= 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[6], '-inf', now - 60)
    if redis.call('ZCARD', KEYS[6]) >= limit then
      redis.call('HSET', KEYS[5], member, held)
      change('held', due, cur, 'burst')
      return result('held', due)
    end
    redis.call('ZADD', KEYS[6], now, member)
  end
end

-- To be scheduled: nothing is written yet. The caller writes the RQ job and COMMIT together,
-- so the index never names an RQ job that does not exist yet.
return result('schedule', due)
"""

# Record a deletion RECONCILE said to schedule, in the same MULTI as RQ's write of its job.
# KEYS: pending index, audit stream, history card, override hash, the dry-run kinds.
# ARGV: member, uid, due, the due RECONCILE saw ("" for none), audit maxlen, card TTL, dry run
#       ("1"/"0"), then the audit entry's fields as key, value, ...
# Returns: {change, due, previous due}: "unchanged" if a concurrent reconcile committed the same,
# "kept" if an operator said keep meanwhile (the RQ job then finds itself superseded).
COMMIT = _PRELUDE + r"""
local member, uid, due, seen = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local cur = redis.call('ZSCORE', KEYS[1], member)
local shown = cur and string.format('%d', tonumber(cur)) or ''
if redis.call('HGET', KEYS[4], 'keep') == 'true' then return {'kept', ARGV[3], shown} end
-- Even when a concurrent reconcile committed the same due time: the RQ job of that time is
-- the one written in this MULTI, whose meta says dry run or not.
if ARGV[7] == '1' then
  mark_dry(KEYS[5], field_of(ARGV, 'apiVersion', 8), field_of(ARGV, 'kind', 8), member, due)
else
  undry(KEYS[5], member)
end
if shown ~= seen and cur and tonumber(cur) == due then return {'unchanged', ARGV[3], shown} end
redis.call('ZADD', KEYS[1], due, member)
local event = (cur and tonumber(cur) ~= due) and 'moved' or 'scheduled'
local entry = {'event', event}
for i = 8, #ARGV do entry[#entry + 1] = ARGV[i] end
entry[#entry + 1] = 'due'; entry[#entry + 1] = ARGV[3]
if cur then entry[#entry + 1] = 'previousDue'; entry[#entry + 1] = shown end
local id = audit(KEYS[2], ARGV[5], entry)
-- The card outlives the deletion it announces: what is pending for weeks stays findable.
local now = clock()
local ttl = math.max(tonumber(ARGV[6]), math.ceil(due - now) + tonumber(ARGV[6]))
note(KEYS[3], ttl, uid, field_of(entry, 'kind'), field_of(entry, 'apiVersion'), decision_of(entry), id, true)
return {event, ARGV[3], shown}
"""

# Retire an RQ job a reconcile replaced or dropped, unless the index names it again by now (a
# concurrent reconcile booked the same job) or a worker runs it (it decides for itself). RQ's
# own delete reads the job's status first and so cannot be made conditional in a MULTI; this
# removes the job from where RQ keeps it (keys named by RQ's classes), no more.
# KEYS: pending index, job hash, dependents, dependencies, results, queue, then the
#       scheduled, finished, failed and deferred registries.
# ARGV: member, due the job was for, job id.  Returns 1 if retired.
RETIRE = r"""
local cur = redis.call('ZSCORE', KEYS[1], ARGV[1])
if cur and tonumber(cur) == tonumber(ARGV[2]) then return 0 end
if redis.call('HGET', KEYS[2], 'status') == 'started' then return 0 end
for i = 7, 10 do redis.call('ZREM', KEYS[i], ARGV[3]) end
redis.call('LREM', KEYS[6], 0, ARGV[3])
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5])
return 1
"""

# A booking, after RQ's own write of its job in the same MULTI: the job leaves the finished and
# failed registries an earlier run of the same id left it in, loses the fields this write left
# out (RQ's '' would have overwritten that run's values), and is kept until it runs; and the
# change goes to the notices outbox, if it is to be announced. One command instead of five.
# Only a job still as booked is tidied: should this run apart from RQ's write (`execute`, after
# Redis lost its scripts), a job that has run since keeps its registry and its expiry.
# KEYS: job hash, finished registry, failed registry, notices outbox.
# ARGV: job id, the status booked, notice member or "", notice score, then the fields to drop.
BOOKED = r"""
if redis.call('HGET', KEYS[1], 'status') == ARGV[2] then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('ZREM', KEYS[3], ARGV[1])
  if #ARGV > 4 then redis.call('HDEL', KEYS[1], unpack(ARGV, 5)) end
  redis.call('PERSIST', KEYS[1])
end
if ARGV[3] ~= '' then redis.call('ZADD', KEYS[4], 'NX', ARGV[4], ARGV[3]) end
return 1
"""

# The worker, before deleting: is this RQ job still the pending deletion, what did operators
# say, and is another run of it already at work? Run when a deletion starts (a claim is taken)
# and again right before its DELETE (the intent to delete is written, so a run that dies after
# its DELETE is recorded as a deletion by the next one, not as a cancellation).
# KEYS: pending index, override hash, claim, intent.
# ARGV: member, "start" or "delete", claim token, claim seconds, intent JSON (for "delete").
# Returns: {due pending or "", Redis seconds, Redis microseconds, keep, until, intent or "",
#           "busy" when another run holds the claim}.
BEGIN = r"""
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
local t = redis.call('TIME')
local override = redis.call('HMGET', KEYS[2], 'keep', 'until')
local claimed = redis.call('GET', KEYS[3])
local busy = ''
if claimed and claimed ~= ARGV[3] then
  busy = 'busy'
elseif ARGV[2] == 'start' then
  redis.call('SET', KEYS[3], ARGV[3], 'EX', ARGV[4])
elseif due and override[1] ~= 'true' then
  redis.call('SET', KEYS[4], ARGV[5], 'EX', 86400)
end
return {due or '', t[1], t[2], override[1] or '', override[2] or '', redis.call('GET', KEYS[4]) or '', busy}
"""

# The worker, after deciding: record the outcome (deleted, delete-requested, would-delete, ...).
# KEYS: pending index, audit stream, history card, tombstone key, terminating set, terminating
#       info, claim, intent, override hash, the dry-run kinds.
# ARGV: member, uid, due, forget ("1": the pending entry ends if it is still this one, and the job's pods
#       stage with the job; "2": only the entry; "0": it stays),
#       audit maxlen, card TTL, tombstone JSON or "", tombstone TTL, follow-up time or "",
#       follow-up info JSON or "", a stage done for good ("" for none), the override's TTL, then
#       the audit entry's fields as key, value, ... (event first).
# Returns the audit entry's id.
FINISH = _PRELUDE + r"""
local member, uid, due = ARGV[1], ARGV[2], tonumber(ARGV[3])
if ARGV[4] ~= '0' and tonumber(redis.call('ZSCORE', KEYS[1], member) or '-1') == due then
  redis.call('ZREM', KEYS[1], member)
  undry(KEYS[10], member)
end
if ARGV[4] == '1' and member == uid then
  -- The job itself is going: its pods stage goes with it (its RQ job finds itself superseded).
  redis.call('ZREM', KEYS[1], 'pods:' .. uid)
  undry(KEYS[10], 'pods:' .. uid)
end
if ARGV[11] ~= '' then
  -- A stage that ran for good: RECONCILE never books it again (see its done:<stage> check).
  redis.call('HSET', KEYS[9], 'done:' .. ARGV[11], string.format('%d', tonumber(redis.call('TIME')[1])))
  redis.call('EXPIRE', KEYS[9], ARGV[12])
end
local entry = {}
for i = 13, #ARGV do entry[#entry + 1] = ARGV[i] end
local id = audit(KEYS[2], ARGV[5], entry)
note(KEYS[3], tonumber(ARGV[6]), uid, field_of(entry, 'kind'), field_of(entry, 'apiVersion'), decision_of(entry),
     id, true)
if ARGV[7] ~= '' then redis.call('SET', KEYS[4], ARGV[7], 'EX', ARGV[8]) end
if ARGV[9] ~= '' then
  redis.call('HSET', KEYS[6], member, ARGV[10])
  redis.call('ZADD', KEYS[5], ARGV[9], member)
else
  redis.call('ZREM', KEYS[5], member)
  redis.call('HDEL', KEYS[6], member)
end
redis.call('DEL', KEYS[7], KEYS[8])
return id
"""

# A run that ends without FINISH gives its claim back (only its own), and its intent with it
# unless a DELETE it sent may have been applied.
# KEYS: claim, intent.  ARGV: claim token, "1" to clear the intent.
RELEASE = r"""
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if ARGV[2] == '1' then redis.call('DEL', KEYS[2]) end
return redis.call('DEL', KEYS[1])
"""

# One audit entry recorded from Python (an operator's action, a failure): the trail and, for
# an entry about a job, its history card.
# KEYS: audit stream, history card ("" when the entry is about no job).
# ARGV: audit maxlen, card TTL, uid, then the entry's fields as key, value, ...
RECORD = _PRELUDE + r"""
local entry = {}
for i = 4, #ARGV do entry[#entry + 1] = ARGV[i] end
local id = audit(KEYS[1], ARGV[1], entry)
if ARGV[3] ~= '' then
  note(KEYS[2], tonumber(ARGV[2]), ARGV[3], field_of(entry, 'kind'), field_of(entry, 'apiVersion'),
       decision_of(entry), id, true)
end
return id
"""


# File one finished job in its history group (jobttl.core.history), before its reconcile.
# KEYS: history records hash, pending index.
# ARGV: group key prefix, uid, group ("" = in no group: take it out), finish time, limit, record
#       JSON, most pushed-out jobs to return.
# Returns: {rank (-1: in no group), when it fell beyond the limit or "", then for each job beyond
# the limit that is not pending by the time it fell beyond: uid, record, rank, that time}.
HISTORY = r"""
local prefix, uid, group = ARGV[1], ARGV[2], ARGV[3]
local prev = redis.call('HGET', KEYS[1], uid)
if prev then
  local ok, p = pcall(cjson.decode, prev)
  if ok and type(p) == 'table' and p['group'] and p['group'] ~= group then
    redis.call('ZREM', prefix .. p['group'], uid)
  end
end
if group == '' then
  if prev then redis.call('HDEL', KEYS[1], uid) end
  return {-1, ''}
end
local zkey, limit, most = prefix .. group, tonumber(ARGV[5]), tonumber(ARGV[7])
redis.call('ZADD', zkey, ARGV[4], uid)
redis.call('HSET', KEYS[1], uid, ARGV[6])
local rank = redis.call('ZREVRANK', zkey, uid)
local own = ''
if rank >= limit then
  local row = redis.call('ZREVRANGE', zkey, rank - limit, rank - limit, 'WITHSCORES')
  own = string.format('%d', tonumber(row[2]))
end
local out = {rank, own}
local beyond = redis.call('ZREVRANGE', zkey, limit, limit + most - 1)
if #beyond > 0 then
  local heads = redis.call('ZREVRANGE', zkey, 0, #beyond - 1, 'WITHSCORES')
  for i, m in ipairs(beyond) do
    local at = tonumber(heads[2 * i])
    local pending = redis.call('ZSCORE', KEYS[2], m)
    if m ~= uid and (not pending or tonumber(pending) > at) then
      local record = redis.call('HGET', KEYS[1], m)
      if record then
        for _, v in ipairs({m, record, limit + i - 1, string.format('%d', at)}) do out[#out + 1] = v end
      end
    end
  end
end
return out
"""


# File one index member among the dry-run records as its RQ job's meta says (or take it out):
# the upgrade from a layout without them (jobttl.core.upgrade), and the resync's repair.
# KEYS: pending index, the dry-run kinds.
# ARGV: member, the key of its RQ job without the due time ("rq:job:delete-<uid>-").
# Returns 1 if it is a dry-run record.
DRY_RUN_FILE = _PRELUDE + r"""
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
local meta = due and meta_of(redis.call('HGET', ARGV[2] .. string.format('%d', tonumber(due)), 'meta'))
local ref = meta and meta['ref']
if meta and meta['dryRun'] == true and type(ref) == 'table' and type(ref[2]) == 'string' then
  mark_dry(KEYS[2], type(ref[1]) == 'string' and ref[1] or '', ref[2], ARGV[1], tonumber(due))
  return 1
end
undry(KEYS[2], ARGV[1])
return 0
"""

# Count what is due, dry run apart, in one read (the gauges, `jobttl status`).
# KEYS: pending index, the dry-run kinds.  ARGV: times (epoch seconds).
# Returns: for each time, the index's members due by then that are not dry-run records; then
# for each kind with dry-run records: the kind, and for each time, its dry-run records due by then.
DUE_COUNTS = r"""
local out, kinds = {}, redis.call('SMEMBERS', KEYS[2])
for i, at in ipairs(ARGV) do out[i] = redis.call('ZCOUNT', KEYS[1], '-inf', at) end
for _, kind in ipairs(kinds) do
  out[#out + 1] = kind
  for i, at in ipairs(ARGV) do
    local dry = redis.call('ZCOUNT', KEYS[2] .. ':' .. kind, '-inf', at)
    out[i] = math.max(out[i] - dry, 0)
    out[#out + 1] = dry
  end
end
return out
"""


ALL = (RECONCILE, COMMIT, RETIRE, BOOKED, BEGIN, FINISH, RELEASE, RECORD, HISTORY, DRY_RUN_FILE, DUE_COUNTS)
_SOURCES: dict[str, str] = {}  # SHA1 → source of the scripts in use: a NOSCRIPT of one of them loads ALL


class Lua:
    """One script, sent without a round trip of its own.

    redis-py's registered Script sends SCRIPT EXISTS before every pipeline that holds one: a
    second round trip for every reconcile. In a pipeline (plain or MULTI) this sends EVALSHA,
    and `execute` loads the script and runs again what Redis did not know (after a restart or
    a failover). Called on its own, it is redis-py's Script (EVALSHA, loaded on NOSCRIPT).
    """

    def __init__(self, redis: Redis, source: str):
        self.source = source
        self._script = redis.register_script(source)
        self.sha = self._script.sha
        _SOURCES[self.sha] = source

    def __call__(self, keys: Sequence[Any] = (), args: Sequence[Any] = (), client: Any = None) -> Any:
        if isinstance(client, Pipeline):
            return client.evalsha(self.sha, len(keys), *keys, *args)
        return self._script(keys=keys, args=args, client=client)


def execute(pipe: Pipeline) -> list[Any]:
    """Execute a pipeline holding `Lua` scripts: one round trip, and one more only when Redis
    has lost a script (then every script is loaded, and the commands that did not run run
    again, in order). Raises the first error, as redis-py's execute does.

    The second round trip goes on `pipe` itself: the same class (the sink's waits for its
    replicas), the same pool. In a MULTI the commands that did run stay applied, and the
    scripts that did not run go in a second MULTI, still after the RQ writes they followed.
    Processes load every script when they start (`load`), and after any NOSCRIPT, so a MULTI
    meets one only when Redis lost its scripts between a reconcile's two round trips, or the
    first time a new version's script runs on a Redis nobody loaded it into. For that moment
    another client may see an RQ job written and not yet committed (a worker finds it
    superseded, and the next event or resync books it), or committed and not yet tidied
    (BOOKED leaves alone a job that ran since): late, never early.
    """
    stack = list(pipe.command_stack)
    transaction = pipe.transaction or pipe.explicit_transaction
    replies = pipe.execute(raise_on_error=False)
    missing = [i for i, reply in enumerate(replies)
               if isinstance(reply, NoScriptError) and str(stack[i][0][1]) in _SOURCES]
    if missing:
        if transaction and not pipe.transaction:
            pipe.multi()
        _queue_loads(pipe)
        for i in missing:
            args, options = stack[i]
            pipe.execute_command(*args, **options)
        again = pipe.execute(raise_on_error=False)
        for reply in again[:len(ALL)]:
            if isinstance(reply, Exception):
                raise reply  # a user that may not load scripts: say so, not NOSCRIPT
        for i, reply in zip(missing, again[len(ALL):]):
            replies[i] = reply
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def load(redis: Redis) -> bool:
    """SCRIPT LOAD every script, in one round trip: what a process does when it starts, so that
    a MULTI rarely meets a NOSCRIPT. False (and a warning) if Redis would not: it is tried again
    on the first NOSCRIPT."""
    try:
        with redis.pipeline(transaction=False) as pipe:
            _queue_loads(pipe)
            pipe.execute()
        return True
    except RedisError as exc:
        logs.record(log, "scripts-not-loaded", level=logging.WARNING, detail=str(exc))
        return False


def _queue_loads(pipe: Pipeline) -> None:
    for source in ALL:
        pipe.script_load(source)


class Scripts:
    """The scripts, one `Lua` each per Redis client."""

    def __init__(self, redis: Redis):
        self.reconcile = Lua(redis, RECONCILE)
        self.commit = Lua(redis, COMMIT)
        self.retire = Lua(redis, RETIRE)
        self.booked = Lua(redis, BOOKED)
        self.release = Lua(redis, RELEASE)
        self.begin = Lua(redis, BEGIN)
        self.finish = Lua(redis, FINISH)
        self.record = Lua(redis, RECORD)
        self.history = Lua(redis, HISTORY)
        self.dry_run_file = Lua(redis, DRY_RUN_FILE)
        self.due_counts = Lua(redis, DUE_COUNTS)

    def count_due(self, times: Sequence[float], client: Any) -> Any:
        """DUE_COUNTS, on `client` (a pipeline queues it)."""
        return self.due_counts(keys=[keys.PENDING_INDEX, keys.DRY_RUN], args=list(times), client=client)

    def record_outcome(self, ref: JobRef, member: str, due: int, entry: dict[str, Any], *, forget: bool,
                       max_entries: int, card_ttl: int, tombstone: str | None = None, tombstone_ttl: int = 0,
                       follow: float | None = None, info: str | None = None, done: str | None = None,
                       override_ttl: int = 0, stages_too: bool = True) -> Any:
        """FINISH, with its keys and arguments in the order the script reads them. `forget`: the
        pending entry ends (if still this one) and, for the job itself, its pods stage with it,
        unless not `stages_too` (the job is held, not gone: its pods stage is its own run's)."""
        forgets = ("1" if stages_too else "2") if forget else "0"
        args: list[Any] = [member, ref.uid, due, forgets, max_entries, card_ttl, tombstone or "",
                           tombstone_ttl, "" if follow is None else follow, info or "", done or "", override_ttl]
        for key, value in entry.items():
            args += [key, value]
        return self.finish(keys=[keys.PENDING_INDEX, keys.AUDIT_STREAM, keys.card(ref.namespace, ref.name),
                                 keys.tombstone(ref.namespace, ref.name, ref.uid), keys.TERMINATING,
                                 keys.TERMINATING_INFO, keys.claim(member), keys.intent(member),
                                 keys.override(ref.uid), keys.DRY_RUN], args=args)
