-- Count what is due, dry run apart, in one read (the gauges, `jobttl status`).
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.DueCounts.
-- Answers: for each time, the index's members due by then that are not dry-run records; then
-- for each kind with dry-run records: the kind, and for each time, its dry-run records due by then.
local out, kinds = {}, redis.call('SMEMBERS', dry_kinds)
for i, at in ipairs(times) do out[i] = redis.call('ZCOUNT', index, '-inf', at) end
for _, kind in ipairs(kinds) do
  out[#out + 1] = kind
  for i, at in ipairs(times) do
    local dry = redis.call('ZCOUNT', dry_kinds .. ':' .. kind, '-inf', at)
    out[i] = math.max(out[i] - dry, 0)
    out[#out + 1] = dry
  end
end
return out
