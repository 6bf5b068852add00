-- Shared by the scripts that write the audit trail, the history cards or the dry-run records:
-- prepended to those that ask for it (jobttl.core.store.scripts, `prelude=True`), below the locals
-- that name their KEYS and ARGV.

-- Redis's clock: seconds (with microseconds), and the same instant as a stream id.
local function clock()
  local t = redis.call('TIME')
  local seconds, micros = tonumber(t[1]), tonumber(t[2])
  return seconds + micros / 1000000, string.format('%d-0', seconds * 1000 + math.floor(micros / 1000))
end

local function append_audit(stream, maxlen, entry)
  return redis.call('XADD', stream, 'MAXLEN', '~', maxlen, '*', unpack(entry))
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

local function field_of(entry, name)
  for i = 1, #entry, 2 do if entry[i] == name then return entry[i + 1] end end
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
-- A kind is Kind.group (jobttl.core.domain.kinds.registry.group_kind): batch/v1 Job and Volcano's Job are two.
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

-- The namespace index beside the index: `namespaces` (keys.NAMESPACES) says in which namespace each
-- member is filed, and a sorted set per namespace (namespaces .. ':' .. namespace) holds its members
-- at the index's due time. Every write of the index keeps it, so a namespace's pending deletions are
-- read without reading any record. A member leaves the set it was filed in, whatever a caller says.
local function unfile_namespace(namespaces, member)
  local was = redis.call('HGET', namespaces, member)
  if was then
    redis.call('ZREM', namespaces .. ':' .. was, member)
    redis.call('HDEL', namespaces, member)
  end
end

local function file_namespace(namespaces, member, namespace, due)
  local was = redis.call('HGET', namespaces, member)
  if was and was ~= namespace then redis.call('ZREM', namespaces .. ':' .. was, member) end
  if was ~= namespace then redis.call('HSET', namespaces, member, namespace) end
  redis.call('ZADD', namespaces .. ':' .. namespace, due, member)
end
