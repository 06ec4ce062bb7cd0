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
-- ARGV[3] prefetch: most extra slots  ARGV[4] hold us (firm at most this far ahead)
-- ARGV[5] headroom (fraction)         ARGV[6] prefetch span us (0: none)
-- ARGV[7] number of sends, then per send: task id ('' = none), priority
--         (high | bulk | retake), call id (names its leases and sliding-log
--         entries), tenant ('' = none), tenant weight (> 0), number of
--         limits m, then m times: key index i,
--         algorithm, limit, period us, burst, cost, extra (as consume.lua)
-- Only GCRA limits are paced and planned; the other algorithms are decided
-- at now by their own decide/commit ("reserve" mode only; "release" skips
-- them, and "plan" decides only pauses: a paused send is planned from the
-- pause's end, as in "reserve").
--
-- Returns, "reserve": {now, then per send: firm (1|0|-1), at us, then per limit
--   the 6 values of consume.lua (ok, remaining, reset, retry, wait, taken)}. firm >= 1:
--   every limit was taken for `at` (<= now + hold), and firm - 1 more
--   slots were prefetched for the same limits (see prefetch). firm <= 0: nothing was
--   taken; `at` is when to come back: firm = -1, the send's place (it was
--   planned, or, within the hold, a slower limit holds it back); firm = 0,
--   the wait of a limit that cannot be planned (a place it held is kept).
--   A bulk send that only a pause blocks is planned (-1): its GCRA limits
--   read ok, the pause blocked with wait = at - now.
-- "plan": {now, then per send: planned us, new (1, or 0 when the task ID
--   already held a place: it keeps it and is not counted twice)}.   "release": {now, released}.
local now = clock(ARGV[1])
local mode = ARGV[2]
local hold, headroom = tonumber(ARGV[4]), tonumber(ARGV[5])
local prefetch_max, prefetch_span = tonumber(ARGV[3]) or 0, tonumber(ARGV[6]) or 0
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

-- set_queued sets slow limit l's earliest instant behind its plan tail pt
-- (nil: none) and its firm book.
local function set_queued(l, pt)
  local pa = (pt or now) - now
  if pa < l.a then pa = l.a end
  l.queued = now + math.max(0, pa + l.T * l.cost - l.tol)
end

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
    set_queued(l, tonumber(redis.call('HGET', l.plan, 't' .. l.extra)))
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

-- Tenants share a fast limit in weighted turns. Each second's plan keeps a
-- record of its tenants (field extra..'@'..sec..'#', JSON {tenant = {weight,
-- count, yields, reserved}}). A tenant that plans into a full future second
-- takes a place from the tenant most over its weighted share there, as long
-- as it stays at or under that tenant's share itself. The place's count
-- moves to it; if the other tenant's place was one of its reservations
-- (below), the reservation moves on to the first free room; otherwise a
-- task holds it, so the other tenant owes a yield in that second and gets
-- a reservation in the first free room instead. The first of that tenant's
-- sends to come back in the second pays the yield: it is planned again on
-- its tenant's earliest reservation (one more dequeue) instead of taking a
-- slot. Reservations hold no task, so moving them costs no dequeue: each
-- displaced send comes back exactly once more. So each second holds its
-- room exactly, and two backlogged tenants split every second by their
-- weights. A send with no tenant is tenant ''.
-- Each tenant keeps a pointer (field 'g'..extra..'#'..tenant): the first
-- second where it may still get a place, so planning a long backlog does
-- not scan the seconds before it again; and one to the first second that
-- may hold its reservations (field 'q'..extra..'#'..tenant).
local function trec(l, sec)
  l.recs = l.recs or {}
  local r = l.recs[sec]
  if r then return r end
  r = {}
  if l.active then
    local raw = redis.call('HGET', l.plan, l.extra .. '@' .. sec .. '#')
    if raw then r = cjson.decode(raw) end
  end
  l.recs[sec] = r
  return r
end

local function trec_save(l, sec, r)
  local f = l.extra .. '@' .. sec .. '#'
  if next(r) == nil then redis.call('HDEL', l.plan, f) else redis.call('HSET', l.plan, f, cjson.encode(r)) end
end

-- victim returns the tenant of record r that tenant t (weight w, cost c)
-- may take a place from: the one most over its weighted share, if the move
-- brings the two closer to their weights' ratio (t, counted half a move
-- on, stays at or under it, so shares round to the nearest place); else
-- nil. Ties go to the smaller name.
local function victim(r, t, w, c)
  local mine = r[t]
  local have = mine and mine[2] or 0
  local best, bestv
  for u, v in pairs(r) do
    if u ~= t and v[2] >= c then
      local norm = v[2] / v[1]
      if not bestv or norm > bestv or (norm == bestv and u < best) then best, bestv = u, norm end
    end
  end
  if best and (have + c / 2) / w <= (r[best][2] - c / 2) / r[best][1] then return best end
  return nil
end

-- tenant_from is the first second from which the send's tenant may find a
-- place on fast limit l: its own pointer, or the fill pointer when that is
-- earlier (room freed by a release), never before now.
local function tenant_from(l, s)
  if not l.active then return l.fill end
  if l.tp == nil then
    -- (a tenant new to the plan may find places from now on)
    l.tp = tonumber(redis.call('HGET', l.plan, 'g' .. l.extra .. '#' .. s.tenant)) or 0
  end
  return math.max(math.floor(now / SEC), math.min(l.tp, l.fill))
end

-- admit reports whether fast limit l's plan has a place for send s in
-- second sec: free room, or (in a future second) a place taken from
-- another tenant (l.victim).
local function admit(l, s, sec)
  l.victim = nil
  l.n = count(l, sec)
  local r = room(l, sec)
  -- (an empty second takes a send larger than its share)
  if r > 0 and (l.n + l.cost <= r or l.n == 0) then return true end
  if r <= 0 or sec <= math.floor(now / SEC) or not l.active then return false end
  l.victim = victim(trec(l, sec), s.tenant, s.weight, l.cost)
  return l.victim ~= nil
end

-- advance moves fast limit l's fill pointer past the seconds that are full
-- from sec (the pointer's second) on.
local function advance(l, sec, n)
  if sec ~= l.fill then return end
  while n >= room(l, l.fill) do
    l.fill = l.fill + 1
    n = count(l, l.fill)
  end
  redis.call('HSET', l.plan, 'f' .. l.extra, l.fill)
end

-- reserve_room gives tenant u (weight w) a reservation on fast limit l: a
-- place in the first free room of a second that has not begun.
local function reserve_room(l, u, w)
  local sec = math.max(l.fill, math.floor(now / SEC) + 1)
  for _ = 1, 100000 do
    local n, r = count(l, sec), room(l, sec)
    if r > 0 and (n + l.cost <= r or n == 0) then break end
    sec = sec + 1
  end
  local n = redis.call('HINCRBY', l.plan, l.extra .. '@' .. sec, l.cost)
  local rec = trec(l, sec)
  local v = rec[u] or {w, 0, 0, 0}
  v[2], v[4] = v[2] + l.cost, (v[4] or 0) + l.cost
  rec[u] = v
  trec_save(l, sec, rec)
  extend(l.plan, ttl_ms((sec + 2) * SEC - now))
  local qf = 'q' .. l.extra .. '#' .. u
  local q = tonumber(redis.call('HGET', l.plan, qf))
  if not q or sec < q then redis.call('HSET', l.plan, qf, sec) end
  advance(l, sec, n)
end

-- first_reserved returns the first second, from now on, where tenant u
-- holds a reservation on fast limit l, or nil.
local function first_reserved(l, u)
  local qf = 'q' .. l.extra .. '#' .. u
  local q = tonumber(redis.call('HGET', l.plan, qf))
  if not q then return nil end
  local sec = math.max(q, math.floor(now / SEC))
  local last = sec + 3600
  while sec <= last do
    local v = trec(l, sec)[u]
    if v and (v[4] or 0) >= l.cost then
      if sec ~= q then redis.call('HSET', l.plan, qf, sec) end
      return sec
    end
    sec = sec + 1
  end
  redis.call('HDEL', l.plan, qf)
  return nil
end

-- unreserve takes one of tenant u's reservations on fast limit l off the
-- plan (the send it was for will not come): its room is free again.
local function unreserve(l, u)
  local sec = first_reserved(l, u)
  if not sec then return end
  local rec = trec(l, sec)
  local v = rec[u]
  v[2], v[4] = v[2] - l.cost, v[4] - l.cost
  if v[2] <= 0 and v[3] <= 0 then rec[u] = nil end
  trec_save(l, sec, rec)
  redis.call('HINCRBY', l.plan, l.extra .. '@' .. sec, -l.cost)
  if sec < l.fill then
    l.fill = sec
    redis.call('HSET', l.plan, 'f' .. l.extra, sec)
  end
end

-- sweep drops the past seconds of a fast limit's plan, from the first not
-- yet swept (the fill pointer may have passed seconds that later plans
-- still counted in) up to now, and moves the fill pointer to now.
local function sweep(l)
  local cur = math.floor(now / SEC)
  if not l.active then l.fill = cur; return end
  if l.swept < cur then
    if cur - l.swept <= 1000 then
      for sec = l.swept, cur - 1 do
        redis.call('HDEL', l.plan, l.extra .. '@' .. sec, l.extra .. '@' .. sec .. '#')
      end
    else
      local pre = l.extra .. '@'
      for _, f in ipairs(redis.call('HKEYS', l.plan)) do
        if string.sub(f, 1, #pre) == pre then
          local sec = tonumber((string.gsub(string.sub(f, #pre + 1), '#$', '')))
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

-- parse reads a send's limits from ARGV starting at index a; returns the
-- send and the next index. The numbers are converted with "+ 0": tonumber
-- parses a string twice, and these always hold numbers.
local function parse(a)
  local s = {id = ARGV[a], prio = ARGV[a + 1], cid = ARGV[a + 2], tenant = ARGV[a + 3],
    weight = ARGV[a + 4] + 0, limits = {}}
  local m = ARGV[a + 5] + 0
  a = a + 6
  for j = 1, m do
    local i = ARGV[a] + 0
    s.limits[j] = {i = i, key = KEYS[3 * i - 2], plan = KEYS[3 * i - 1], backlog = KEYS[3 * i],
      algo = ARGV[a + 1], limit = ARGV[a + 2] + 0, period = ARGV[a + 3] + 0,
      burst = ARGV[a + 4] + 0, cost = ARGV[a + 5] + 0, extra = ARGV[a + 6]}
    a = a + 7
  end
  return s, a
end

-- unplan takes a planned send out of second sec of its fast limits' plans:
-- where its tenant owes a yield there, the yield is paid (its count already
-- went to another tenant); elsewhere its count is given back: to a tenant
-- that owes a yield there (released sends only), else to the room. It reports
-- whether a yield was paid. With pay_only, it changes nothing unless some
-- limit has a yield to pay (a send that comes back in its second).
local function unplan(s, sec, pay_only)
  local owes = false
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' and l.fast and l.active then
      local v = trec(l, sec)[s.tenant]
      if v and v[3] >= l.cost then owes = true end
    end
  end
  if pay_only and not owes then return false end
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' and l.fast and l.active then
      local r = trec(l, sec)
      local v = r[s.tenant]
      -- A place taken from a tenant that still owes the yield goes back
      -- to it (its send there goes after all), else to the plan's room.
      local owed
      if not pay_only then
        for u, w in pairs(r) do
          if u ~= s.tenant and w[3] >= l.cost and (not owed or u < owed) then owed = u end
        end
      end
      -- (a released send's yield, or the other tenant's, no longer needs
      -- the reservation made for it)
      local drop
      if v and v[3] >= l.cost then
        v[3] = v[3] - l.cost
        if not pay_only then drop = s.tenant end
      elseif owed and v and v[2] >= l.cost then
        v[2] = v[2] - l.cost
        r[owed][2], r[owed][3] = r[owed][2] + l.cost, r[owed][3] - l.cost
        drop = owed
      else
        if v and v[2] >= l.cost then v[2] = v[2] - l.cost end
        local f = l.extra .. '@' .. sec
        if (tonumber(redis.call('HGET', l.plan, f)) or 0) > 0 then
          redis.call('HINCRBY', l.plan, f, -l.cost)
          if sec < l.fill then
            l.fill = sec
            redis.call('HSET', l.plan, 'f' .. l.extra, sec)
          end
        end
      end
      if v then
        if v[2] <= 0 and v[3] <= 0 then r[s.tenant] = nil end
        trec_save(l, sec, r)
      end
      if drop then unreserve(l, drop) end
    end
  end
  return owes
end

-- held_at returns the planned instant of a send that holds a place in any
-- of its backlogs (it was planned earlier), else nil: the latest of its
-- places (they are one instant, unless a pause moved the plan of one of
-- its scopes later: defer_plan.lua).
local function held_at(s)
  if s.id == '' then return nil end
  local held
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then
      local at = tonumber(redis.call('ZSCORE', l.backlog, s.id))
      if at and (not held or at > held) then held = at end
    end
  end
  return held
end

local function unlist(s)
  if s.id == '' then return end
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then redis.call('ZREM', l.backlog, s.id) end
  end
end

-- leave takes a planned send out of its place (held, us): from its fast
-- limits' second (unplan; not with paid, when the yield its tenant owed
-- there was paid instead) and from its backlogs. On a slow limit where it
-- was the last planned, the plan tail goes back to its place, so the next
-- send planned there may take it. It reports whether a backlog held it.
-- (A place in a second that has passed was swept: leaving it changes no
-- count.)
local function leave(s, held, paid)
  if not paid then unplan(s, math.floor(held / SEC), false) end
  local left = false
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then
      local score = tonumber(redis.call('ZSCORE', l.backlog, s.id))
      if score then
        local last = redis.call('ZREVRANGE', l.backlog, 0, 0)[1]
        redis.call('ZREM', l.backlog, s.id)
        left = true
        if not l.fast and last == s.id then
          local tail = math.ceil(score)
          if tail > now + l.a then
            redis.call('HSET', l.plan, 't' .. l.extra, us(tail))
            set_queued(l, tail)
          else
            redis.call('HDEL', l.plan, 't' .. l.extra)
            set_queued(l, nil)
          end
        end
      end
    end
  end
  return left
end

-- plan_search finds the earliest instant, from `from` on, at which every
-- GCRA limit's plan has room for the send; it writes nothing.
--
-- A slow limit's sends (a pair, a 1/s sender, a limit adapted below one
-- send a second) go behind its plan tail, the new ones and the ones that
-- lost their places alike (a send that came back and cannot go within the
-- hold, or that a pause holds: it left its place first, with leave, so a
-- send planned last there takes its own place again). So each of many sends
-- that lose their places together (a 1/s sender paused for a minute, a
-- number adapted down to 0.8/s, an overdue backlog) gets a place of its
-- own, in the order they come back. On the firm book's next slot instead,
-- they would all get the same one, and all but one would come back to be
-- planned again, and again: O(n^2) dequeues. The price is order: a send
-- that lost its place goes behind the sends on its slow limits that still
-- hold theirs, as it does on its fast limits (behind their fill pointer).
-- A recipient's message delayed by a pause may so go after that
-- recipient's next message, planned before it came back; keeping the order
-- would cost every later send a second dequeue, the churn this avoids.
local function plan_search(s, from)
  local at = from
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' and not l.fast and l.queued > at then at = l.queued end
  end
  local sec = math.floor(at / SEC)
  for _ = 1, 100000 do
    local moved = false
    for _, l in ipairs(s.limits) do
      if l.algo == 'gcra' and l.fast then
        local first = tenant_from(l, s)
        if first > sec then sec = first; moved = true; break end
        if not admit(l, s, sec) then sec = sec + 1; moved = true; break end
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

-- plan_count charges the send to second sec of every fast limit's plan:
-- to free room, or, where plan_search found one (displace), to a place
-- taken from another tenant, who then owes a yield in that second. With
-- claim, a limit where the send's tenant holds a reservation in sec gives
-- the send that place instead.
local function plan_count(s, sec, displace, claim)
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' and l.fast then
      local taken = displace and l.victim
      local was = l.active
      local r = trec(l, sec)
      local mine = r[s.tenant] or {s.weight, 0, 0, 0}
      local claimed = claim and (mine[4] or 0) >= l.cost
      local n
      if taken or claimed then
        n = count(l, sec)
      else
        n = redis.call('HINCRBY', l.plan, l.extra .. '@' .. sec, l.cost)
      end
      if claimed then
        mine[4] = mine[4] - l.cost
      else
        mine[1], mine[2] = s.weight, mine[2] + l.cost
      end
      r[s.tenant] = mine
      local moved
      if taken then
        -- A reservation of the other tenant moves on; a task's place
        -- leaves a yield, and its send a reservation further on.
        local v = r[taken]
        v[2] = v[2] - l.cost
        if (v[4] or 0) >= l.cost then v[4] = v[4] - l.cost else v[3] = v[3] + l.cost end
        moved = {taken, v[1]}
      end
      trec_save(l, sec, r)
      l.active = true
      if moved then reserve_room(l, moved[1], moved[2]) end
      -- The tenant's pointer: this second while it may take more here.
      local tp = sec
      if n >= room(l, sec) and not victim(r, s.tenant, s.weight, l.cost) then tp = sec + 1 end
      if tp ~= l.tp then
        l.tp = tp
        redis.call('HSET', l.plan, 'g' .. l.extra .. '#' .. s.tenant, tp)
      end
      if sec == l.fill then
        advance(l, sec, n)
      elseif not was then
        redis.call('HSET', l.plan, 'f' .. l.extra, l.fill)
      end
      extend(l.plan, ttl_ms((sec + 2) * SEC - now))
    end
  end
end

-- plan_commit records a send planned for `at` (second sec); with claim, on
-- its tenant's reservations there.
local function plan_commit(s, at, sec, claim)
  plan_count(s, sec, not claim, claim)
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

-- pause_from returns the instant from which a send may be planned while
-- one of its pause limits is paused: the first whole second at or after
-- the latest pause's end (asynq brings a send back at a whole second: one
-- planned inside the second the pause ends in would come back paused);
-- nil when none is. Pause limits are decided at most once a send (l.d).
-- PLAN_PAUSE_MAX: the longest pause a send is planned past, at enqueue
-- ("plan") or when it comes back paused ("reserve"): 5 min,
-- throttle.MaxPlannedPause.
local PLAN_PAUSE_MAX = 300 * SEC

local function pause_from(s)
  local u
  for _, l in ipairs(s.limits) do
    if l.algo == 'pause' then
      l.d = l.d or decide(l.algo, l.key, now, l.limit, l.period, l.burst, l.cost, l.extra)
      if l.d.ok == 0 and (not u or l.d.reset > u) then u = l.d.reset end
    end
  end
  if not u then return nil end
  return math.ceil(u / SEC) * SEC
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
      -- A paused send is planned from the pause's end, so it comes back
      -- once, at the limits' pace, when the pause is over; but only past a
      -- pause that ends within PLAN_PAUSE_MAX. A longer one (credentials
      -- refused: until a probe succeeds; an operator's pause until resumed;
      -- an hour's spam limit) may well end early, and its sends must then
      -- be found by `channels resume` among the tasks that waited for it:
      -- they are planned as if it were not there, and wait for it when
      -- they come back.
      pace_all(s)
      local from = pause_from(s)
      if from and from - now > PLAN_PAUSE_MAX then from = nil end
      local at, sec = plan_search(s, from or now)
      plan_commit(s, at, sec, false)
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
  local held = held_at(s)
  if held then
    for _, l in ipairs(s.limits) do
      if l.algo == 'gcra' then pace(l) end
    end
    -- Its fast limits' seconds: the count (or the yield its tenant owes).
    if leave(s, held, false) then released = 1 end
  end
  return {now, released}
end

-- prefetch returns how many more slots a new bulk send, firm now, may take
-- for its caller to hand out without asking again (0 or >= 2): on every
-- limit, as many as fit in prefetch_span at its rate (so the most a
-- prefetch can leave unused is that span's worth) and in what is left of
-- its burst or window now, and no plan in progress. Only GCRA and fixed
-- window limits prefetch, beside pauses; any other limit makes it 0.
local function prefetch(s, at)
  if prefetch_span <= 0 or prefetch_max < 2 or at ~= now or s.prio ~= 'bulk' then return 0 end
  local k = prefetch_max
  for _, l in ipairs(s.limits) do
    local n = 0
    if l.algo == 'gcra' then
      local unit = l.T * l.cost
      if l.fast and not l.active then
        n = math.min(math.floor(prefetch_span / unit), floor_units(l.tol - l.a - unit, unit))
      end
    elseif l.algo == 'fixed_window' then
      n = math.min(math.floor(prefetch_span * l.limit / (l.period * l.cost)), math.floor(l.d.rem_after / l.cost))
    elseif l.algo == 'pause' then
      n = k -- not paused now (the send is firm); a pause set later reaches memory within PrefetchTTL
    end
    if n < k then k = n end
  end
  if k < 2 then return 0 end
  return k
end

-- reserve_one decides one send (mode 'reserve') and appends its values to
-- out: firm, at, then 6 per limit.
local function reserve_one(s, out)
-- A send planned earlier takes the firm book's slot, not one behind the plan.
local held = held_at(s)
local back = held ~= nil
-- (retake: a high-priority re-take of a send's slot, already counted; it
-- goes at the first free slot of its fast limits, and its slow limits,
-- whose slot it holds, are only re-spaced from now)
local retake = s.prio == 'retake'
local high = s.prio == 'high' or retake
pace_all(s)
-- ... unless another tenant took its place: it pays its tenant's yield and
-- is planned again.
local displaced = back and unplan(s, math.floor(held / SEC), true)
-- A limit paced at under a second a send (fast) must not be taken for an
-- instant far past its own next slot: the gap would be lost to every other
-- send on it. When a slower limit (a pair) holds the send that far back,
-- nothing is taken and the send comes back at that instant.
local fastmax, slowmax, tmin, paced = now, now, nil, false
for _, l in ipairs(s.limits) do
  if l.algo == 'gcra' then
    paced = true
    if l.fast then
      if l.firm > fastmax then fastmax = l.firm end
      if not tmin or l.T < tmin then tmin = l.T end
    elseif not retake and l.firm > slowmax then slowmax = l.firm end
  end
end
local at = math.max(fastmax, slowmax)
local gap = tmin ~= nil and slowmax > fastmax + tmin
-- The other algorithms are decided at now.
local blocked_wait, pause_wait = 0, 0
for _, l in ipairs(s.limits) do
  if l.algo ~= 'gcra' then
    local d = decide(l.algo, l.key, now, l.limit, l.period, l.burst, l.cost, l.extra)
    if not d then error('sluice: unknown algorithm ' .. tostring(l.algo)) end
    l.d = d
    if d.ok == 0 and l.algo == 'pause' then
      if d.wait > pause_wait then pause_wait = d.wait end
    elseif d.ok == 0 and d.wait > blocked_wait then
      blocked_wait = d.wait
    end
  end
end
-- A bulk send with GCRA limits that only a pause blocks is planned for the
-- pause's end (below): the scope's waiting sends then come back once each,
-- at their limits' pace, instead of all at once when the pause ends. Held
-- back by another limit too (a daily window), or high priority (it takes
-- the first free slot when the pause ends, ahead of the plan), it comes
-- back after the wait, without a place.
-- Only a pause that ends within PLAN_PAUSE_MAX: a longer one (credentials
-- refused, an operator's pause until resumed) may end early, and `channels
-- resume` or a successful probe then runs the sends that wait for it; a
-- place at its planned end would hold them back for hours.
local paused = pause_wait > 0 and pause_wait <= PLAN_PAUSE_MAX and blocked_wait == 0 and not high and paced
if pause_wait > blocked_wait and not paused then blocked_wait = pause_wait end

-- A new bulk send goes now only if the plan has room for it in the current
-- second: it never overtakes sends planned before it.
local plan_at, plan_sec
local firm = 0
if blocked_wait == 0 and not paused and at - now <= hold and not gap and not displaced then
  if back or high then
    firm = 1
  else
    -- Firm only where the plan puts it now: not behind sends counted in
    -- this second that have not yet come back (their slots would be lost).
    plan_at, plan_sec = plan_search(s, now)
    if plan_sec == math.floor(now / SEC) and plan_at <= at + (tmin or 0) then firm = 1 end
  end
end

local extra = 0
if firm == 1 then
  if not back then extra = prefetch(s, at) end
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then l.ahead_after = math.max(l.a, at - now) + l.T * l.cost * (1 + extra) end
    if l.algo == 'gcra' and retake and not l.fast then
      -- The next send on it comes at least one interval after this one.
      gcra_store(l.key, l.extra, now, l.replace, math.max(l.a, at - now + l.T * l.cost))
    elseif l.algo == 'gcra' then
      gcra_store(l.key, l.extra, now, l.replace, l.ahead_after)
    else
      if extra > 0 and l.algo == 'fixed_window' then
        l.d.cost = l.cost * (1 + extra)
        l.d.rem_after = l.d.rem_after - l.cost * extra
      end
      commit(l.d, s.cid)
    end
  end
  if back then
    -- One that goes in a second before its place's (it came back early:
    -- its pause was ended) gives that second's count back.
    local hsec = math.floor(held / SEC)
    if hsec > math.floor(at / SEC) then unplan(s, hsec, false) end
    unlist(s)
  else
    -- A send that was not planned takes room in its second, so that later
    -- plans count it; an idle plan starts after the firm book anyway.
    local busy = false
    for _, l in ipairs(s.limits) do
      if l.algo == 'gcra' and l.fast and l.active then busy = true end
    end
    if busy and s.prio ~= 'retake' then plan_count(s, math.floor(at / SEC), false) end
  end
elseif blocked_wait > 0 then
  -- Blocked by a limit that cannot be reserved: come back after its wait
  -- (fixed windows count the caller among their waiters, as consume.lua).
  at = math.max(at, now + blocked_wait)
  for _, l in ipairs(s.limits) do
    if l.d and l.d.ok == 0 and l.d.algo == 'fixed_window' and l.d.wait == blocked_wait then fixed_window_record(l.d) end
  end
elseif not paused and (back or high) and at - now <= hold and not displaced then
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
  -- A paused send gets its place from the first whole second at or after
  -- the pause's end. A displaced send takes its tenant's first reservation.
  local from = now
  if paused then from = pause_from(s) end
  if paused and back and not displaced and held >= from then
    -- Its place is past the pause's end already (it came back early).
    at = held
  else
    local claim
    if displaced then
      for _, l in ipairs(s.limits) do
        if not claim and l.algo == 'gcra' and l.fast and l.active then
          local sec = first_reserved(l, s.tenant)
          if sec then claim = sec end
        end
      end
      -- (a reservation inside the pause would bring it back paused; left
      -- unclaimed, it only counts in a second the pause wastes anyway)
      if claim and claim * SEC < from then claim = nil end
    end
    -- A send that held a place gives it up, so that the plan does not
    -- count it twice: its count in its second (given to the room, or to a
    -- tenant that owes a yield there), its backlog entries, and a slow
    -- limit's tail where it was planned last.
    if back then leave(s, held, displaced) end
    if claim then
      plan_at, plan_sec = claim * SEC, claim
    elseif not plan_at or back or high or paused then
      plan_at, plan_sec = plan_search(s, from)
    end
    plan_commit(s, plan_at, plan_sec, claim ~= nil)
    at = plan_at
  end
end

-- -1: not firm, and `at` is the send's place (planned, or held back
-- within the hold by a slower limit: it asks again then).
if firm == 0 and blocked_wait == 0 then out[#out + 1] = -1 else out[#out + 1] = firm + extra end
out[#out + 1] = math.ceil(at)
for _, l in ipairs(s.limits) do
  if l.algo == 'gcra' then
    local ok, taken = 0, 0
    local rem = math.max(0, floor_units(l.tol - l.a, l.T))
    local reset = now + l.a
    if firm == 1 then
      ok, taken = 1, l.cost
      local new_ahead = l.ahead_after
      rem = math.max(0, floor_units(l.tol - new_ahead, l.T))
      reset = now + math.ceil(new_ahead)
    elseif paused or (blocked_wait > 0 and l.firm - now <= hold) then
      -- This limit alone would have allowed the send; or a pause holds it,
      -- and the pause is reported as what blocked it (its key names the
      -- tasks to run at once when the pause is ended early).
      ok = 1
    end
    out[#out + 1] = ok
    out[#out + 1] = rem
    out[#out + 1] = reset
    out[#out + 1] = math.ceil(math.max(0, l.firm - now))
    out[#out + 1] = math.ceil(math.max(0, at - now))
    out[#out + 1] = taken
  else
    -- (a pause that planned the send: its wait is to the planned place)
    if paused and l.algo == 'pause' and l.d.ok == 0 then l.d.wait = math.max(0, math.ceil(at - now)) end
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
