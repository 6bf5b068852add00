"""The Lua scripts jobttl runs inside Redis: each compares and writes atomically, in one round trip.

Why scripts: a reconcile must compare the decision with what is pending and then write the
index, the audit entry and the job's history without another process slipping in between.
A lock costs several round trips per event (SET, the reads, the writes, DEL) and serialises
the sink's threads on it; a script does the same in one, on Redis's own clock (``TIME``),
so the guard's and the schedule's notion of "now" never depends on a process's clock.

RQ's own data (the RQ job hash) is only read here, never written: `Schedule.apply` writes
RQ jobs with RQ's code. The scripts assume a single Redis (or a Sentinel-managed primary):
they touch keys derived from their arguments, which Redis Cluster does not allow.
"""

from __future__ import annotations

from redis import Redis

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

-- The job's history card: the latest decision per UID, and its audit ids (newest first).
local function note(card, log, ttl, uid, decision, id)
  redis.call('HSET', card, uid, decision, uid .. '@', id)
  if log then
    redis.call('LPUSH', log, id)
    redis.call('LTRIM', log, 0, 99)
  end
  for _, key in ipairs({card, log}) do
    if redis.call('TTL', key) < ttl then redis.call('EXPIRE', key, ttl) end
  end
end

local function card_value(entry)
  local value = {}
  for i = 1, #entry, 2 do
    local k = entry[i]
    if k ~= 'namespace' and k ~= 'name' and k ~= 'uid' then value[k] = entry[i + 1] end
  end
  return cjson.encode(value)
end

local function meta_of(raw)
  if not raw then return nil end
  local ok, meta = pcall(cjson.decode, raw)
  if ok and type(meta) == 'table' then return meta end
  return nil
end
"""

# Reconcile one decision about one member (a UID, or a UID's pod stage) with the schedule.
#
# KEYS: pending index, override hash, audit stream, history card, card log, held hash,
#       the guard's recent-newly-due set
# ARGV: member, uid, verdict ("expires" or why not), expires_at, mode (guarded | collect |
#       release), burst limit (0: none), RQ job key prefix of the stage ("rq:job:delete-"),
#       dry run ("1"/"0"), decision JSON for the card when nothing changes, held JSON,
#       audit maxlen, card TTL, echo ("1": the object is going away and someone other than
#       its deletion's own RQ job says so), then the audit entry's fields as key, value, ...
# Returns: {change, due, previous due, previous RQ job status} (empty strings for none); change
# "schedule" means: write the RQ job, with COMMIT, in one MULTI.
RECONCILE = _PRELUDE + r"""
local member, uid, verdict = ARGV[1], ARGV[2], ARGV[3]
local mode, limit, prefix, dry = ARGV[5], tonumber(ARGV[6]), ARGV[7], ARGV[8] == '1'
local decision, held, maxlen, ttl = ARGV[9], ARGV[10], ARGV[11], tonumber(ARGV[12])
local echo = ARGV[13] == '1'
local now, stamp = clock()

local function job_key(due) return prefix .. uid .. '-' .. string.format('%d', due) end

-- What jobttl's own deletion wrote on the card; the echoes of that deletion leave it there.
local OWN = {['delete-requested'] = true, ['deleted'] = true, ['stuck'] = true}

local function settle(value)
  -- A decision that changes nothing: kept on the card once, not appended to the trail.
  local kept = redis.call('HGET', KEYS[4], uid)
  if kept == value then return end
  if echo and kept then
    local ok, prior = pcall(cjson.decode, kept)
    if ok and type(prior) == 'table' and OWN[prior['event']] then return end
  end
  note(KEYS[4], nil, ttl, uid, value, stamp)
end

local function change(event, due, previous, reason)
  local entry = {'event', event}
  for i = 14, #ARGV do entry[#entry + 1] = ARGV[i] end
  if due then entry[#entry + 1] = 'due'; entry[#entry + 1] = string.format('%d', due) end
  if previous then entry[#entry + 1] = 'previousDue'; entry[#entry + 1] = string.format('%d', previous) end
  if reason then entry[#entry + 1] = 'reason'; entry[#entry + 1] = reason end
  local id = audit(KEYS[3], maxlen, entry)
  note(KEYS[4], KEYS[5], ttl, uid, card_value(entry), id)
end

local cur = redis.call('ZSCORE', KEYS[1], member)
local state, meta = false, nil
if cur then
  cur = tonumber(cur)
  local row = redis.call('HMGET', job_key(cur), 'status', 'meta')
  state, meta = row[1], meta_of(row[2])
end
local function result(change_, due)
  return {change_, due and string.format('%d', due) or '', cur and string.format('%d', cur) or '', state or ''}
end

if verdict ~= 'expires' then
  if not cur then settle(decision); return result('ignored') end
  -- The object is going away while its deletion runs: most likely that deletion's own echo
  -- (the watch reports the deletionTimestamp, then the removal, before the worker has
  -- recorded it). The running job re-reads the object and records the outcome itself.
  if echo and state == 'started' then return result('running', cur) end
  redis.call('ZREM', KEYS[1], member)
  change('cancelled', nil, cur, verdict)
  return result('cancelled')
end

local override = redis.call('HMGET', KEYS[2], 'keep', 'until')
if override[1] == 'true' then
  if not cur then settle(cjson.encode({event = 'skipped', reason = 'kept-by-operator'})); return result('kept') end
  redis.call('ZREM', KEYS[1], member)
  change('cancelled', nil, cur, 'kept-by-operator')
  return result('cancelled')
end
local due = tonumber(ARGV[4])
if override[2] then due = math.max(due, tonumber(override[2])) end

if cur == due then
  if state == 'started' then return result('running', due) end
  local same_mode = meta ~= nil and (meta['dryRun'] == true) == dry
  if same_mode and (state == 'scheduled' or state == 'queued' or state == 'deferred'
      or (state == 'failed' and meta['permanentFailure'])
      or (dry and meta['wouldDeleteAt'])) then
    return result('unchanged', due)
  end
end

-- Newly due: due now, and not already due in the schedule. A dry-run record is not a
-- deletion on its way: once dry-run is off, it faces the guard like any other.
local already = cur and cur <= now and not (meta and meta['dryRun'])
if due <= now and not dry and not already then
  if mode == 'collect' then return result('due-now', due) end
  if mode == 'guarded' and limit > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[7], '-inf', now - 60)
    if redis.call('ZCARD', KEYS[7]) >= limit then
      redis.call('HSET', KEYS[6], member, held)
      change('held', due, cur, 'burst')
      return result('held', due)
    end
    redis.call('ZADD', KEYS[7], now, member)
  end
end

-- To be scheduled: nothing is written yet. The caller writes the RQ job and COMMIT together,
-- so the index never names an RQ job that does not exist yet.
return result('schedule', due)
"""

# Record a deletion RECONCILE said to schedule, in the same MULTI as RQ's write of its job.
# KEYS: pending index, audit stream, history card, card log.
# ARGV: member, uid, due, the due RECONCILE saw ("" for none), audit maxlen, card TTL, then the
#       audit entry's fields as key, value, ...
# Returns: {change, due, previous due}: "unchanged" if a concurrent reconcile committed the same.
COMMIT = _PRELUDE + r"""
local member, uid, due, seen = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local cur = redis.call('ZSCORE', KEYS[1], member)
local shown = cur and string.format('%d', tonumber(cur)) or ''
if shown ~= seen and cur and tonumber(cur) == due then return {'unchanged', ARGV[3], shown} end
redis.call('ZADD', KEYS[1], due, member)
local event = (cur and tonumber(cur) ~= due) and 'moved' or 'scheduled'
local entry = {'event', event}
for i = 7, #ARGV do entry[#entry + 1] = ARGV[i] end
entry[#entry + 1] = 'due'; entry[#entry + 1] = ARGV[3]
if cur then entry[#entry + 1] = 'previousDue'; entry[#entry + 1] = shown end
local id = audit(KEYS[2], ARGV[5], entry)
note(KEYS[3], KEYS[4], tonumber(ARGV[6]), uid, card_value(entry), id)
return {event, ARGV[3], shown}
"""

# The worker, before deleting: is this RQ job still the pending deletion, and what did operators say?
# KEYS: pending index, override hash.  ARGV: member.
# Returns: {due pending or "", Redis seconds, Redis microseconds, keep, until}.
BEGIN = r"""
local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
local t = redis.call('TIME')
local override = redis.call('HMGET', KEYS[2], 'keep', 'until')
return {due or '', t[1], t[2], override[1] or '', override[2] or ''}
"""

# The worker, after deciding: record the outcome (deleted, delete-requested, would-delete, ...).
# KEYS: pending index, audit stream, history card, card log, tombstone key, terminating set.
# ARGV: member, uid, due, forget ("1": the pending entry ends if it is still this one),
#       audit maxlen, card TTL, tombstone JSON or "", tombstone TTL, follow-up time or "",
#       then the audit entry's fields as key, value, ... (event first).
# Returns the audit entry's id.
FINISH = _PRELUDE + r"""
local member, uid, due = ARGV[1], ARGV[2], tonumber(ARGV[3])
if ARGV[4] == '1' and tonumber(redis.call('ZSCORE', KEYS[1], member) or '-1') == due then
  redis.call('ZREM', KEYS[1], member)
end
local entry = {}
for i = 10, #ARGV do entry[#entry + 1] = ARGV[i] end
local id = audit(KEYS[2], ARGV[5], entry)
note(KEYS[3], KEYS[4], tonumber(ARGV[6]), uid, card_value(entry), id)
if ARGV[7] ~= '' then redis.call('SET', KEYS[5], ARGV[7], 'EX', ARGV[8]) end
if ARGV[9] ~= '' then redis.call('ZADD', KEYS[6], ARGV[9], member) else redis.call('ZREM', KEYS[6], member) end
return id
"""


class Scripts:
    """The scripts, registered once per Redis client (EVALSHA, loaded again after a restart)."""

    def __init__(self, redis: Redis):
        self.reconcile = redis.register_script(RECONCILE)
        self.commit = redis.register_script(COMMIT)
        self.begin = redis.register_script(BEGIN)
        self.finish = redis.register_script(FINISH)
