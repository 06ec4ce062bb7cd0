-- reserve.lua: paced delivery by reservation (see Redis.Reserve and
-- Redis.Plan). It is joined after prelude.lua, the algorithm files and
-- dispatch.lua, like consume.lua, and decides one send ("release") or a
-- batch of sends ("reserve", "plan") in one atomic step. It holds the
-- arguments and the mode dispatch; the parts it includes hold the rest, in
-- the order they are joined (a part calls only what an earlier one
-- defines):
--   pace.lua          a GCRA limit's pace, its firm book's earliest slot and
--                     its plan book's seconds (room, count, fill pointer)
--   tenant_turns.lua  tenants' weighted shares of a fast limit's seconds
--   plan_book.lua     a send's place: find, take and give up; "plan" and
--                     "release" of one send
--   firm_book.lua     "reserve" of one send: firm now, or planned
--   firm_fast.lua     "reserve" of the common send (planned, back at its
--                     place, nothing holding it) and its "plan" (no place
--                     yet, no pause), lean
-- The books, places, holds, yields and turns are defined in throttle's
-- package documentation (doc.go, "Reservation books").
--
-- Emission interval T = period / limit / (1 - headroom): headroom (a
-- fraction, e.g. 0.01) keeps the sends' spacing a little wider than the
-- limit, so network jitter between the sender and the provider cannot put
-- one more than the limit into any span the provider counts.
--
-- KEYS: per distinct limiter key, its state key (a GCRA limit's firm book),
--       then, for a GCRA limit only, its plan hash and its backlog (zset):
--       the other algorithms keep no books. Every key the script touches is
--       one of these.
-- ARGV[1] now us ("0" = Redis TIME)   ARGV[2] mode: reserve | plan | release
-- ARGV[3] prefetch: most extra slots  ARGV[4] hold us (firm at most this far ahead)
-- ARGV[5] headroom (fraction)         ARGV[6] prefetch span us (0: none)
-- ARGV[7] number of sends
-- ARGV[8] number of limit specs k, then k times: algorithm, limit, period
--         us, burst, cost, extra (as consume.lua; a pause's are 0 but its
--         cost 1): the sends of a call share a few
-- Then per send: task id ('' = none), priority (high | bulk | retake),
--         call id (names its leases and sliding-log entries), tenant ('' =
--         none), tenant weight (> 0), number of limits m, then m times: key
--         index i (its state key is KEYS[i], a GCRA limit's plan and
--         backlog KEYS[i+1] and KEYS[i+2]) and spec number
-- Only GCRA limits are paced and planned; the other algorithms are decided
-- at now by their own decide/commit ("reserve" mode only; "release" skips
-- them, and "plan" decides only pauses: a paused send is planned from the
-- pause's end, as in "reserve").
--
-- Returns, "reserve": {now, then per send: firm (1|0|-1), at us, then per limit
--   the 6 values of consume.lua (ok, remaining, reset, retry, wait, taken),
--   but a pause that does not hold the send has one value, 1 (ok 1,
--   remaining 1, reset now, the rest 0: the caller fills them in)}. firm >= 1:
--   every limit was taken for `at` (<= now + hold), and firm - 1 more
--   slots were prefetched for the same limits (see prefetch). firm <= 0: nothing was
--   taken; `at` is when to come back: firm = -1, the send's place (it was
--   planned, or, within the hold, a slower limit holds it back); firm = 0,
--   the wait of a limit that cannot be planned (a place it held is kept).
--   A bulk send that only a pause blocks is planned (-1): its GCRA limits
--   read ok, the pause blocked with wait = at - now.
-- "plan": {now, then per send: planned us, new (1, or 0 when the task ID
--   already held a place: it keeps it and is not counted twice)}.   "release": {now, released}.
-- (KEYS and ARGV as locals: a global is a table lookup each time, and
-- parse reads ARGV some 20 times a send)
local KEYS, ARGV = KEYS, ARGV
local now = clock(ARGV[1])
local mode = ARGV[2]
local hold, headroom = tonumber(ARGV[4]), tonumber(ARGV[5])
local prefetch_max, prefetch_span = tonumber(ARGV[3]) or 0, tonumber(ARGV[6]) or 0
local nsends = tonumber(ARGV[7])

-- SEC is a second in us: asynq schedules in whole seconds, so the plan
-- book of a fast limit counts its sends per second.
local SEC = 1000000

-- The limit specs, read once a call (their numbers converted once), by
-- their number as ARGV writes it ("1", "2", ...): a send's spec is then a
-- table lookup of its ARGV text, not a conversion (strtod) and a lookup.
local specs = {}
local first_send = 9 + 6 * (ARGV[8] + 0)
for b = 9, first_send - 1, 6 do
  local p = {algo = ARGV[b], limit = ARGV[b + 1] + 0, period = ARGV[b + 2] + 0,
    burst = ARGV[b + 3] + 0, cost = ARGV[b + 4] + 0, extra = ARGV[b + 5]}
  if p.algo == 'gcra' then
    -- (for parse: paced faster than a send a second; slower than the
    -- hold: listless)
    local T = p.period / p.limit / (1 - headroom)
    p.fast, p.long = T < SEC, T * p.cost > hold
  end
  specs[tostring((b - 3) / 6)] = p
end

-- pause_limits holds a pause's limit table per key index (its ARGV text,
-- as specs): the sends of a call share it. Its one per-send field, l.d,
-- is set by each send's decide_now before it is read; pause_from, in
-- "plan", reuses the first send's decision: nothing changes a pause within
-- a call.
local pause_limits = {}

-- parse reads a send's limits from ARGV starting at index a; returns the
-- send and the next index. The numbers are converted with "+ 0": tonumber
-- parses a string twice, and these always hold numbers. A limit l is the
-- table every part reads and annotates: l.key, l.plan and l.backlog are
-- its KEYS (a pause's table holds l.key, l.algo and the decision l.d, and
-- is shared by the sends of the call: pause_limits); pace (pace.lua) adds
-- its pace and books. s.limits lists them in the order of the request (the
-- reply's), s.gcra the GCRA limits and s.other the rest, each in that
-- order.
local function parse(a)
  local s = {id = ARGV[a], prio = ARGV[a + 1], cid = ARGV[a + 2], tenant = ARGV[a + 3],
    weight = ARGV[a + 4] + 0, limits = {}, gcra = {}, other = {}}
  local m = ARGV[a + 5] + 0
  local fast, long = false, nil
  a = a + 6
  for j = 1, m do
    local ref, p = ARGV[a], specs[ARGV[a + 1]]
    local algo, l = p.algo
    if algo == 'pause' then
      -- (a pause has a key and its decision, nothing else)
      l = pause_limits[ref]
      if not l then
        l = {key = KEYS[ref + 0], algo = algo}
        pause_limits[ref] = l
      end
    else
      local i = ref + 0
      l = {key = KEYS[i], plan = KEYS[i + 1], backlog = KEYS[i + 2], algo = algo,
        limit = p.limit, period = p.period, burst = p.burst, cost = p.cost, extra = p.extra}
      if p.fast then
        fast = true
      elseif p.long then
        if long then long[#long + 1] = l else long = {l} end
      end
    end
    s.limits[j] = l
    if algo == 'gcra' then s.gcra[#s.gcra + 1] = l else s.other[#s.other + 1] = l end
    a = a + 2
  end
  -- Listless: a GCRA limit slower than the hold (a pair's 6 s) keeps no
  -- backlog entry for a send that also has a fast limit (a number's
  -- 80/s). Its place would be the fast limit's (plan_commit gives every
  -- backlog the same instant), and what else reads a backlog does without
  -- it: NextTooLate looks at limits paced within the hold only (with a
  -- channel's hold over the producer's 2 s, a pair's sends are not pulled
  -- early), and leave finds whether a send was planned last there from
  -- the plan tail. So a planned WhatsApp send writes, reads and removes one
  -- backlog entry, not two. The price: a pause of such a limit's own scope
  -- (a pair's, WhatsApp 131056) moves none of its sends (DeferPlanned):
  -- they come back at their places, find the pause and are planned past
  -- it, one dequeue more each; and Backlog lists none for it (PlanTail
  -- tells whether one is planned). Plan and release decide with a hold
  -- too: Plan's (DefaultHold unless the caller gives one), release
  -- DefaultHold.
  if fast and long then
    for _, l in ipairs(long) do l.listless = true end
  end
  return s, a
end

--- @include "pace.lua"
--- @include "tenant_turns.lua"
--- @include "plan_book.lua"
--- @include "firm_book.lua"
--- @include "firm_fast.lua"

-- The mode dispatch. "release" gives up one send's place; "plan" and
-- "reserve" decide each send in order, and a later send sees what the
-- earlier ones took.
-- The plan fields kept (flush_plans) are written and the books' lifetimes
-- extended once, at the end (extend_later), also when the body fails part
-- way: its writes stay, as a script's writes do, and so must their TTLs.
local function body()
  if mode == 'release' then return {now, release_one(parse(first_send))} end
  local one = reserve_one
  if mode == 'plan' then one = plan_one end
  local fast = FAST_PATH and (mode == 'plan' and plan_fast or fast_one)
  local out, a = {now}, first_send
  for _ = 1, nsends do
    local nxt = fast and fast(a, out)
    if nxt then
      a = nxt
    else
      local s
      s, a = parse(a)
      one(s, out)
    end
  end
  return out
end
local ok, res = pcall(body)
-- (a failing flush, OOM say, still leaves the TTLs set, and its error is
-- the script's when the body's was none)
local flushed, flush_err = pcall(flush_plans)
flush_extends()
if ok and not flushed then ok, res = false, flush_err end
if not ok then
  -- A command's error keeps its code (WRONGTYPE, OOM, READONLY: a client
  -- follows a failover on READONLY): Redis 7 hands pcall the error as a
  -- string ("READONLY You can't write ..."; a table {err = ...} is taken
  -- too); re-raised, it would read "ERR READONLY ...". The script's own
  -- errors (error(): "user_script:…: sluice: …") are raised again as they
  -- were.
  if type(res) == 'table' and res.err then return res end
  if type(res) == 'string' and string.match(res, '^%u[%u_]* ') then return redis.error_reply(res) end
  error(res, 0)
end
return res
