-- File one finished job in its keepLast group (jobttl.core.store.keeplast_index), before its
-- reconcile; a job in no group (`group` nil) is taken out of the one it was in.
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.KeepLastFile.
-- Answers {rank (-1: in no group), when it fell beyond the limit or "", then for each job beyond
-- the limit that is not pending by the time it fell beyond: uid, record, rank, that time}.
local prev = redis.call('HGET', records, uid)
if prev then
  local ok, p = pcall(cjson.decode, prev)
  if ok and type(p) == 'table' and p['group'] and p['group'] ~= group then
    redis.call('ZREM', prefix .. p['group'], uid)
  end
end
if not group then
  if prev then redis.call('HDEL', records, uid) end
  return {-1, ''}
end
local zkey = prefix .. group
redis.call('ZADD', zkey, finished_at, uid)
redis.call('HSET', records, uid, record)
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
    local pending = redis.call('ZSCORE', index, m)
    if m ~= uid and (not pending or tonumber(pending) > at) then
      local other = redis.call('HGET', records, m)
      if other then
        for _, v in ipairs({m, other, limit + i - 1, string.format('%d', at)}) do out[#out + 1] = v end
      end
    end
  end
end
return out
