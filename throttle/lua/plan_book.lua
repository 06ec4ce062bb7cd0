-- plan_book.lua: a send's place in the plan book: find it (plan_search),
-- take it (plan_commit), give it up (unplan, leave); and the "plan" and
-- "release" of one send. Part of reserve.lua (joined after
-- tenant_turns.lua; see there).
--
-- A place is a planned instant (us) that a send holds under its task ID
-- in the backlog of each of its GCRA limits (its backlog zset, task id ->
-- planned us) but the listless ones (reserve.lua, parse: a pair beside its
-- number), counted in that second of each fast limit's plan and behind the
-- plan tail of each slow one.

-- unplan takes a planned send out of second sec of its fast limits' plans:
-- where its tenant owes a yield there, the yield is paid (its count already
-- went to another tenant); elsewhere its count is given back: to a tenant
-- that owes a yield there (released sends only), else to the room. It reports
-- whether a yield was paid. With pay_only, it changes nothing unless some
-- limit has a yield to pay (a send that comes back in its second).
local function unplan(s, sec, pay_only)
  local owes = false
  for _, l in ipairs(s.gcra) do
    if l.fast and l.active then
      local v = trec(l, sec)[s.tenant]
      if v and v[3] >= l.cost then owes = true end
    end
  end
  if pay_only and not owes then return false end
  for _, l in ipairs(s.gcra) do
    if l.fast and l.active then
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
        local f = sec_field(l.extra, sec)
        if (tonumber(plan_get(l.plan, f)) or 0) > 0 then
          plan_incr(l.plan, f, -l.cost)
          if sec < l.fill then
            l.fill = sec
            plan_set(l.plan, 'f' .. l.extra, sec)
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
  for _, l in ipairs(s.gcra) do
    if not l.listless then
      local at = tonumber(redis.call('ZSCORE', l.backlog, s.id))
      if at and (not held or at > held) then held = at end
    end
  end
  return held
end

-- unlist takes send s out of its backlogs (it goes now).
local function unlist(s)
  if s.id == '' then return end
  for _, l in ipairs(s.gcra) do
    if not l.listless then redis.call('ZREM', l.backlog, s.id) end
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
  if not paid then unplan(s, floor(held / SEC), false) end
  local left = false
  for _, l in ipairs(s.gcra) do
    local score, last
    if not l.listless then
      score = tonumber(redis.call('ZSCORE', l.backlog, s.id))
      if score then
        last = redis.call('ZREVRANGE', l.backlog, 0, 0)[1]
        redis.call('ZREM', l.backlog, s.id)
        left = true
      end
    end
    if not l.fast then
      -- Was it planned last there? By the tail: the one its place set is
      -- an interval after the end of its second (after its place, with no
      -- fast limit), or after the end of the second it held before a pause
      -- moved its place (DeferPlanned moves the fast limit's places, not
      -- this tail); a send planned after it has a tail an interval later at
      -- least. So with no backlog entry (the limit listless, or listless
      -- when the send was planned: another hold, a fast limit adapted
      -- since) the tail tells, and its place here was at the latest the
      -- tail less an interval; with one, the backlog's last must agree
      -- with the tail (a listless send planned after it has no entry).
      -- Only a pause that moved the place by about an interval or more
      -- (6 s for a pair) can make a later send's tail pass for its own:
      -- the next send planned there may then be planned too early, and the
      -- firm book holds it back.
      -- (the tail is read only where it decides: with an entry, only on a
      -- limit that can be listless; past is how far it lies after the end
      -- of the place's second)
      local t
      if not score or (last == s.id and l.T * l.cost > hold) then t = tonumber(plan_get(l.plan, 't' .. l.extra)) end
      local past = t and t - (floor((score or held) / SEC) + 1) * SEC
      if score then
        -- (a later send's tail is an interval further; half an interval of
        -- headroom and a probe's second allowed for)
        if past and past > 1.5 * l.T * l.cost + SEC then last = nil end
      elseif past and past <= l.T * l.cost + SEC then
        score, last = min(held, t - l.T * l.cost), s.id
      end
    end
    if score and not l.fast and last == s.id then
      local tail = ceil(score)
      if tail > now + l.a then
        plan_set(l.plan, 't' .. l.extra, us(tail))
        set_queued(l, tail)
      else
        plan_del(l.plan, 't' .. l.extra)
        set_queued(l, nil)
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
  for _, l in ipairs(s.gcra) do
    if not l.fast and queued(l) > at then at = l.queued end
  end
  local sec = floor(at / SEC)
  for _ = 1, 100000 do
    local moved = false
    for _, l in ipairs(s.gcra) do
      if l.fast then
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
  for _, l in ipairs(s.gcra) do
    if l.fast then off = max(off, l.n * l.T) end
  end
  at = max(at, min(sec * SEC + off, sec * SEC + SEC - 1))
  return ceil(at), sec
end

-- plan_count charges the send to second sec of every fast limit's plan:
-- to free room, or, where plan_search found one (displace), to a place
-- taken from another tenant, who then owes a yield in that second. With
-- claim, a limit where the send's tenant holds a reservation in sec gives
-- the send that place instead.
local function plan_count(s, sec, displace, claim)
  for _, l in ipairs(s.gcra) do
    if l.fast then
      local taken = displace and l.victim
      local was = l.active
      local r = trec(l, sec)
      local mine = r[s.tenant] or {s.weight, 0, 0, 0}
      local claimed = claim and (mine[4] or 0) >= l.cost
      local n
      if taken or claimed then
        n = count(l, sec)
      else
        n = plan_incr(l.plan, sec_field(l.extra, sec), l.cost)
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
        plan_set(l.plan, 'g' .. l.extra .. '#' .. s.tenant, tp)
      end
      if sec == l.fill then
        advance(l, sec, n)
      elseif not was then
        plan_set(l.plan, 'f' .. l.extra, l.fill)
      end
      extend_later(l.plan, ttl_ms((sec + 2) * SEC - now))
    end
  end
end

-- plan_commit records a send planned for `at` (second sec); with claim, on
-- its tenant's reservations there.
local function plan_commit(s, at, sec, claim)
  plan_count(s, sec, not claim, claim)
  local shares_fast = false
  for _, l in ipairs(s.gcra) do
    if l.fast then shares_fast = true end
  end
  for _, l in ipairs(s.gcra) do
    if not l.fast then
      -- Sends that come back in one second take a fast limit's slots in
      -- the order they arrive, anywhere in it: behind a fast limit, the
      -- next send on a slow one (a pair) is planned one interval after
      -- the second ends. Alone, a slow limit's send goes at its slot.
      local base = at
      if shares_fast then base = (sec + 1) * SEC end
      local tail = ceil(base + l.T * l.cost)
      local old = tonumber(plan_get(l.plan, 't' .. l.extra))
      if not old or tail > old then
        plan_set(l.plan, 't' .. l.extra, us(tail))
        extend_later(l.plan, ttl_ms(tail - now))
      end
    end
    if s.id ~= '' and not l.listless then
      redis.call('ZADD', l.backlog, at, s.id)
      extend_later(l.backlog, ttl_ms(at - now) + 3600000)
    end
  end
end

-- pause_from returns the instant from which a send may be planned while
-- one of its pause limits is paused: the first whole second at or after
-- the latest pause's end (asynq brings a send back at a whole second: one
-- planned inside the second the pause ends in would come back paused);
-- nil when none is. A pause's decision is its limit table's l.d: in
-- "reserve" decide_now's for this send; in "plan" the first send's of the
-- call (the sends share a pause's table: pause_limits, reserve.lua).
-- PLAN_PAUSE_MAX: the longest pause a send is planned past, at enqueue
-- ("plan") or when it comes back paused ("reserve"): 5 min,
-- throttle.MaxPlannedPause.
local PLAN_PAUSE_MAX = 300 * SEC

local function pause_from(s)
  local u
  for _, l in ipairs(s.other) do
    if l.algo == 'pause' then
      l.d = l.d or decide(l.algo, l.key, now, l.limit, l.period, l.burst, l.cost, l.extra)
      if l.d.ok == 0 and (not u or l.d.reset > u) then u = l.d.reset end
    end
  end
  if not u then return nil end
  return ceil(u / SEC) * SEC
end

-- plan_one plans send s (mode "plan") and appends its two values to out:
-- its planned instant, and 1, or 0 when it already held a place.
local function plan_one(s, out)
  local held = held_at(s)
  if held then
    -- Already planned (enqueued again): keep its place, count it once.
    out[#out + 1] = held
    out[#out + 1] = 0
    return
  end
  -- Each send reads the books anew (through the script's copy of the
  -- plan hashes): it shares them with the ones before.
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

-- release_one gives up send s's place (mode "release"): a planned send
-- that will never come back (archived, deleted) leaves its backlogs and
-- gives its room back. It returns 1 when a backlog held it, else 0.
local function release_one(s)
  local held = held_at(s)
  if not held then return 0 end
  for _, l in ipairs(s.gcra) do
    pace(l)
  end
  -- Its fast limits' seconds: the count (or the yield its tenant owes).
  if leave(s, held, false) then return 1 end
  return 0
end
