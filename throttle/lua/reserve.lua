-- reserve.lua: paced delivery by reservation (see Redis.Reserve and
-- Redis.Plan). It is joined after prelude.lua and the algorithm files, like
-- consume.lua, and decides one send ("reserve", "release") or a batch of
-- sends ("plan") in one atomic step.
--
-- Two books per GCRA limit:
--   the firm book   the limit's own TAT (gcra.lua's state): a firm
--                   reservation is an exact instant `at`, at most `hold` us
--                   ahead, and the send goes out then. Consume and Reserve
--                   share this book, so the limit is never exceeded.
--   the plan book   PTAT, the tail of the sends planned on the limit (hash
--                   KEYS[3i-1], field = the GCRA field or 'tat'), and the
--                   backlog (zset KEYS[3i], task id -> planned us). A planned
--                   send is told to come back at its planned instant and
--                   takes its firm slot then; sends planned later queue
--                   behind it, so a backlog comes back about once per send.
-- Emission interval T = period / limit / (1 - headroom): headroom (a
-- fraction, e.g. 0.01) keeps the sends' spacing a little wider than the
-- limit, so network jitter between the sender and the provider cannot put
-- one more than the limit into any span the provider counts.
--
-- KEYS: per limit i: KEYS[3i-2] state, KEYS[3i-1] plan hash, KEYS[3i] backlog
-- ARGV[1] now us ("0" = Redis TIME)   ARGV[2] mode: reserve | plan | release
-- ARGV[3] unused                      ARGV[4] hold us (firm at most this far ahead)
-- ARGV[5] headroom (fraction)         ARGV[6] unused
-- ARGV[7] number of sends, then per send: task id ('' = none), priority
--         (high | bulk), call id (names its leases and sliding-log
--         entries), number of limits m, then m times: key index i,
--         algorithm, limit, period us, burst, cost, extra (as consume.lua)
-- Only GCRA limits are paced and planned; the other algorithms are decided
-- at now by their own decide/commit ("reserve" mode only; "plan" and
-- "release" skip them).
--
-- Returns, "reserve": {now, then per send: firm (1|0), at us, then per limit
--   the 6 values of consume.lua (ok, remaining, reset, retry, wait, taken)}. firm = 1:
--   every limit was taken for `at` (<= now + hold). firm = 0: nothing was
--   taken; `at` is when to come back (a planned slot when the send was
--   planned, else the blocked limits' wait).
-- "plan": {now, then per send: planned us, new (1, or 0 when the task ID
--   already held a place: it keeps it and is not counted twice)}.   "release": {now, released}.
local now = clock(ARGV[1])
local mode = ARGV[2]
local hold, headroom = tonumber(ARGV[4]), tonumber(ARGV[5])
local nsends = tonumber(ARGV[7])

-- Plan books. A limit paced slower than one send a second (a pair limit,
-- a 1/s sender) keeps a plan tail: PTAT, field 't'..extra. A faster one
-- keeps a count per future whole second (fields extra..'@'..second) and a
-- fill pointer (field 'f'..extra, the first second that may have room):
-- asynq schedules in whole seconds, so a second's count is the number of
-- sends that will come back in it. Second s holds floor((s+1)R) - floor(sR)
-- sends, R = 1e6/T per second, so the seconds average the paced rate. A
-- send planned later than the pointer (held back by another limit) takes
-- room in its own second without moving the pointer, and a gap it leaves
-- is filled by later plans.
local SEC = 1000000

local function pace(l)
  local T = (l.period / l.limit) / (1 - headroom)
  local tol = T * l.burst
  local raw, wrong
  if l.extra == '' then raw, wrong = read('GET', l.key) else raw, wrong = read('HGET', l.key, l.extra) end
  local a = (tonumber(raw) or now) - now
  if a < 0 then a = 0 end
  l.T, l.tol, l.a, l.replace = T, tol, a, wrong
  l.firm = now + math.max(0, a + T * l.cost - tol) -- earliest by the firm book
  l.fast = T < SEC
  if l.fast then
    l.rate = SEC / T
    local v = redis.call('HMGET', l.plan, 'f' .. l.extra, 's' .. l.extra)
    local f = tonumber(v[1])
    -- No fill pointer: nothing is planned on the limit (the plan is idle).
    l.active = f ~= nil
    l.fill = f or 0
    l.swept = tonumber(v[2]) or l.fill -- first second not yet swept
  else
    local pt = tonumber(redis.call('HGET', l.plan, 't' .. l.extra))
    local pa = (pt or now) - now
    if pa < a then pa = a end
    l.queued = now + math.max(0, pa + T * l.cost - tol) -- earliest behind the plan
  end
end

-- room is second sec's share of the paced rate; the current second only
-- has what is left of it, so a campaign planned at 12.6s does not put a
-- whole second's sends into its last 0.4s and push the firm book ahead.
-- The plan starts where the firm book ends: sends taken without a plan
-- are counted only there.
local function room(l, sec)
  local start = now + (l.a or 0)
  local first = math.floor(start / SEC)
  if sec < first then return 0 end
  local from = sec * l.rate
  if sec == first then from = (start / SEC) * l.rate end
  return math.floor((sec + 1) * l.rate) - math.floor(from)
end

local function count(l, sec)
  if not l.active then return 0 end
  return tonumber(redis.call('HGET', l.plan, l.extra .. '@' .. sec)) or 0
end

-- sweep drops the past seconds of a fast limit's plan, from the first not
-- yet swept (the fill pointer may have passed seconds that later plans
-- still counted in) up to now, and moves the fill pointer to now.
local function sweep(l)
  local cur = math.floor(now / SEC)
  if not l.active then l.fill = cur; return end
  if l.swept < cur then
    if cur - l.swept <= 1000 then
      for sec = l.swept, cur - 1 do redis.call('HDEL', l.plan, l.extra .. '@' .. sec) end
    else
      local pre = l.extra .. '@'
      for _, f in ipairs(redis.call('HKEYS', l.plan)) do
        if string.sub(f, 1, #pre) == pre then
          local sec = tonumber(string.sub(f, #pre + 1))
          if sec and sec < cur then redis.call('HDEL', l.plan, f) end
        end
      end
    end
    l.swept = cur
    redis.call('HSET', l.plan, 's' .. l.extra, cur)
  end
  if l.fill < cur then
    l.fill = cur
    redis.call('HSET', l.plan, 'f' .. l.extra, cur)
  end
end

-- set_tat takes a GCRA limit's slot at `at`: gcra.lua's commit, with the
-- theoretical arrival time one paced interval after the slot.
local function set_tat(l, at)
  gcra_store(l.key, l.extra, now, l.replace, math.max(l.a, at - now) + l.T * l.cost)
end

-- parse reads a send's limits from ARGV starting at index a; returns the
-- send and the next index. The numbers are converted with "+ 0": tonumber
-- parses a string twice, and these always hold numbers.
local function parse(a)
  local s = {id = ARGV[a], prio = ARGV[a + 1], cid = ARGV[a + 2], limits = {}}
  local m = ARGV[a + 3] + 0
  a = a + 4
  for j = 1, m do
    local i = ARGV[a] + 0
    s.limits[j] = {i = i, key = KEYS[3 * i - 2], plan = KEYS[3 * i - 1], backlog = KEYS[3 * i],
      algo = ARGV[a + 1], limit = ARGV[a + 2] + 0, period = ARGV[a + 3] + 0,
      burst = ARGV[a + 4] + 0, cost = ARGV[a + 5] + 0, extra = ARGV[a + 6]}
    a = a + 7
  end
  return s, a
end

-- held_at returns the planned instant of a send that holds a place in any
-- of its backlogs (it was planned earlier), else nil.
local function held_at(s)
  if s.id == '' then return nil end
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then
      local at = tonumber(redis.call('ZSCORE', l.backlog, s.id))
      if at then return at end
    end
  end
  return nil
end

local function unlist(s)
  if s.id == '' then return end
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then redis.call('ZREM', l.backlog, s.id) end
  end
end

-- plan_search finds the earliest instant, from `from` on, at which every
-- GCRA limit's plan has room for the send; it writes nothing.
local function plan_search(s, from, back)
  local at = from
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' and not l.fast then
      -- A send planned before is already behind the slow limit's plan tail.
      local e = l.queued
      if back then e = l.firm end
      if e > at then at = e end
    end
  end
  local sec = math.floor(at / SEC)
  for _ = 1, 100000 do
    local moved = false
    for _, l in ipairs(s.limits) do
      if l.algo == 'gcra' and l.fast then
        if l.fill > sec then sec = l.fill; moved = true; break end
        l.n = count(l, sec)
        local r = room(l, sec)
        -- (an empty second takes a send larger than its share)
        if r <= 0 or (l.n + l.cost > r and l.n > 0) then sec = sec + 1; moved = true; break end
      end
    end
    if not moved then break end
  end
  if sec * SEC > at then at = sec * SEC end
  -- Within its second, a send is expected after those counted before it.
  local off = 0
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' and l.fast then off = math.max(off, l.n * l.T) end
  end
  at = math.max(at, math.min(sec * SEC + off, sec * SEC + SEC - 1))
  return math.ceil(at), sec
end

-- plan_count charges the send to second sec of every fast limit's plan.
local function plan_count(s, sec)
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' and l.fast then
      local n = redis.call('HINCRBY', l.plan, l.extra .. '@' .. sec, l.cost)
      local was = l.active
      l.active = true
      if sec == l.fill then
        while n >= room(l, l.fill) do
          l.fill = l.fill + 1
          n = count(l, l.fill)
        end
        redis.call('HSET', l.plan, 'f' .. l.extra, l.fill)
      elseif not was then
        redis.call('HSET', l.plan, 'f' .. l.extra, l.fill)
      end
      extend(l.plan, ttl_ms((sec + 2) * SEC - now))
    end
  end
end

-- plan_commit records a send planned for `at` (second sec).
local function plan_commit(s, at, sec)
  plan_count(s, sec)
  local shares_fast = false
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' and l.fast then shares_fast = true end
  end
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then
      if not l.fast then
        -- Sends that come back in one second take a fast limit's slots in
        -- the order they arrive, anywhere in it: behind a fast limit, the
        -- next send on a slow one (a pair) is planned one interval after
        -- the second ends. Alone, a slow limit's send goes at its slot.
        local base = at
        if shares_fast then base = (sec + 1) * SEC end
        local tail = math.ceil(base + l.T * l.cost)
        local old = tonumber(redis.call('HGET', l.plan, 't' .. l.extra))
        if not old or tail > old then
          redis.call('HSET', l.plan, 't' .. l.extra, us(tail))
          extend(l.plan, ttl_ms(tail - now))
        end
      end
      if s.id ~= '' then
        redis.call('ZADD', l.backlog, at, s.id)
        extend(l.backlog, ttl_ms(at - now) + 3600000)
      end
    end
  end
end

local function pace_all(s)
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then
      pace(l)
      if l.fast then sweep(l) end
    end
  end
end

if mode == 'plan' then
  local out = {now}
  local a = 8
  for _ = 1, nsends do
    local s
    s, a = parse(a)
    local held = held_at(s)
    if held then
      -- Already planned (enqueued again): keep its place, count it once.
      out[#out + 1] = held
      out[#out + 1] = 0
    else
      -- Each send re-reads the books: it shares them with the ones before.
      pace_all(s)
      local at, sec = plan_search(s, now)
      plan_commit(s, at, sec)
      out[#out + 1] = at
      out[#out + 1] = 1
    end
  end
  return out
end

if mode == 'release' then
  local s = parse(8)
  -- A planned send that will never come back (archived, deleted) leaves
  -- its backlogs and gives its room back.
  local released = 0
  if s.id ~= '' then
    for _, l in ipairs(s.limits) do
      if l.algo == 'gcra' then
        local score = tonumber(redis.call('ZSCORE', l.backlog, s.id))
        if score then
          pace(l)
          local last = redis.call('ZREVRANGE', l.backlog, 0, 0)[1]
          redis.call('ZREM', l.backlog, s.id)
          released = 1
          if l.fast then
            local sec = math.floor(score / SEC)
            local f = l.extra .. '@' .. sec
            if (tonumber(redis.call('HGET', l.plan, f)) or 0) > 0 then
              redis.call('HINCRBY', l.plan, f, -l.cost)
              if sec < l.fill then redis.call('HSET', l.plan, 'f' .. l.extra, sec) end
            end
          elseif last == s.id then
            local tail = math.ceil(score)
            if tail > now + l.a then
              redis.call('HSET', l.plan, 't' .. l.extra, us(tail))
            else
              redis.call('HDEL', l.plan, 't' .. l.extra)
            end
          end
        end
      end
    end
  end
  return {now, released}
end

-- reserve_one decides one send (mode 'reserve') and appends its values to
-- out: firm, at, then 6 per limit.
local function reserve_one(s, out)
-- A send planned earlier takes the firm book's slot, not one behind the plan.
local back = held_at(s) ~= nil
local high = s.prio == 'high'
pace_all(s)
-- A limit paced at under a second a send (fast) must not be taken for an
-- instant far past its own next slot: the gap would be lost to every other
-- send on it. When a slower limit (a pair) holds the send that far back,
-- nothing is taken and the send comes back at that instant.
local fastmax, slowmax, tmin = now, now, nil
for _, l in ipairs(s.limits) do
  if l.algo == 'gcra' then
    if l.fast then
      if l.firm > fastmax then fastmax = l.firm end
      if not tmin or l.T < tmin then tmin = l.T end
    elseif l.firm > slowmax then slowmax = l.firm end
  end
end
local at = math.max(fastmax, slowmax)
local gap = tmin ~= nil and slowmax > fastmax + tmin
-- The other algorithms are decided at now.
local blocked_wait = 0
for _, l in ipairs(s.limits) do
  if l.algo ~= 'gcra' then
    local d = decide(l.algo, l.key, now, l.limit, l.period, l.burst, l.cost, l.extra)
    if not d then error('sluice: unknown algorithm ' .. tostring(l.algo)) end
    l.d = d
    if d.ok == 0 and d.wait > blocked_wait then blocked_wait = d.wait end
  end
end

-- A new bulk send goes now only if the plan has room for it in the current
-- second: it never overtakes sends planned before it.
local plan_at, plan_sec
local firm = 0
if blocked_wait == 0 and at - now <= hold and not gap then
  if back or high then
    firm = 1
  else
    -- Firm only where the plan puts it now: not behind sends counted in
    -- this second that have not yet come back (their slots would be lost).
    plan_at, plan_sec = plan_search(s, now, false)
    if plan_sec == math.floor(now / SEC) and plan_at <= at + (tmin or 0) then firm = 1 end
  end
end

if firm == 1 then
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then
      set_tat(l, at)
    else
      commit(l.d, s.cid)
    end
  end
  if back then
    unlist(s)
  else
    -- A send that was not planned takes room in its second, so that later
    -- plans count it; an idle plan starts after the firm book anyway.
    local busy = false
    for _, l in ipairs(s.limits) do
      if l.algo == 'gcra' and l.fast and l.active then busy = true end
    end
    if busy then plan_count(s, math.floor(at / SEC)) end
  end
elseif blocked_wait > 0 then
  -- Blocked by a limit that cannot be reserved: come back after its wait
  -- (fixed windows count the caller among their waiters, as consume.lua).
  at = math.max(at, now + blocked_wait)
  for _, l in ipairs(s.limits) do
    if l.d and l.d.ok == 0 and l.d.algo == 'fixed_window' and l.d.wait == blocked_wait then fixed_window_record(l.d) end
  end
elseif (back or high) and at - now <= hold then
  -- Within the hold, held back by a slower limit (a pair): keep the place
  -- and ask again at that instant, without taking the fast limits' slots
  -- meanwhile.
  if back then
    for _, l in ipairs(s.limits) do
      if l.algo == 'gcra' then redis.call('ZADD', l.backlog, 'XX', at, s.id) end
    end
  end
else
  -- Planned: a new bulk send behind the plan; a send that fell behind its
  -- place (workers were down) or a high-priority send beyond the hold gets
  -- a new place, so that none of them is polled again before it may go.
  if not plan_at or back or high then plan_at, plan_sec = plan_search(s, now, back) end
  plan_commit(s, plan_at, plan_sec)
  at = plan_at
end

out[#out + 1] = firm
out[#out + 1] = math.ceil(at)
for _, l in ipairs(s.limits) do
  if l.algo == 'gcra' then
    local ok, taken = 0, 0
    local rem = math.max(0, floor_units(l.tol - l.a, l.T))
    local reset = now + l.a
    if firm == 1 then
      ok, taken = 1, l.cost
      local new_ahead = math.max(l.a, at - now) + l.T * l.cost
      rem = math.max(0, floor_units(l.tol - new_ahead, l.T))
      reset = now + math.ceil(new_ahead)
    elseif blocked_wait > 0 and l.firm - now <= hold then
      ok = 1 -- this limit alone would have allowed the send
    end
    out[#out + 1] = ok
    out[#out + 1] = rem
    out[#out + 1] = reset
    out[#out + 1] = math.ceil(math.max(0, l.firm - now))
    out[#out + 1] = math.ceil(math.max(0, at - now))
    out[#out + 1] = taken
  else
    emit(out, l.d, firm == 1)
  end
end
end

-- mode == 'reserve': each send in order; a later send sees what the
-- earlier ones took.
local out = {now}
local a = 8
for _ = 1, nsends do
  local s
  s, a = parse(a)
  reserve_one(s, out)
end
return out
