-- A run that ends without FINISH gives its claim back (only its own), and its intent with it
-- unless a DELETE it sent may have been applied.
-- KEYS and ARGV: locals named by jobttl.core.store.scripts.Release. Answers 1 if it held the claim.
if redis.call('GET', claim) ~= token then return 0 end
if clear_intent then redis.call('DEL', intent) end
return redis.call('DEL', claim)
