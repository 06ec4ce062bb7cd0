-- states.lua: the order of delivery states and what a move between two of
-- them adds to a tenant's counters. Joined before record_sent.lua and
-- update.lua, which call its functions; it touches no key of its own.
--
-- Order: archived 0 (the worker gave the task up; a re-run may still send
-- it) < queued 1 < sent_unconfirmed = sent 2 < delivered 3 < read 4 <
-- failed = undelivered 5. A state only moves up; failed and undelivered
-- are final.
local RANK = {archived = 0, queued = 1, sent_unconfirmed = 2, sent = 2, delivered = 3, read = 4, failed = 5, undelivered = 5}

-- rank of a state; -1 for none (false: no record).
local function rank(s)
  if not s then return -1 end
  return RANK[s] or -1
end

-- count adds to the counters hash what a provider-reported move from old
-- to new counts: delivered (reached delivered or read), read, undelivered
-- (failed or undelivered after the provider accepted the message).
local function count(counters, old, new)
  local o, n = rank(old), rank(new)
  if n >= 3 and n <= 4 and o < 3 then redis.call('HINCRBY', counters, 'delivered', 1) end
  if n == 4 and o < 4 then redis.call('HINCRBY', counters, 'read', 1) end
  if n == 5 and o < 5 then redis.call('HINCRBY', counters, 'undelivered', 1) end
end

-- apply moves the record to state s (with its code, reason and time, ms)
-- when s ranks above the record's state, and counts the move. It returns
-- 1 when it moved, 0 when s was stale (a late "sent" after "delivered").
local function apply(record, counters, s, code, reason, at)
  local old = redis.call('HGET', record, 'state')
  if rank(s) <= rank(old) then return 0 end
  redis.call('HSET', record, 'state', s, 'code', code, 'reason', reason, 'at', at)
  count(counters, old, s)
  return 1
end
