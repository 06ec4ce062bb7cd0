-- firm_book.lua: "reserve" of one send (reserve_one): a firm slot in every
-- GCRA limit's firm book now, a place in the plan book, or the wait of a
-- limit that cannot be planned. Part of reserve.lua (joined after
-- plan_book.lua; see there).

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
        n = min(floor(prefetch_span / unit), floor_units(l.tol - l.a - unit, unit))
      end
    elseif l.algo == 'fixed_window' then
      n = min(floor(prefetch_span * l.limit / (l.period * l.cost)), floor(l.d.rem_after / l.cost))
    elseif l.algo == 'pause' then
      n = k -- not paused now (the send is firm); a pause set later reaches memory within PrefetchTTL
    end
    if n < k then k = n end
  end
  if k < 2 then return 0 end
  return k
end

-- firm_at returns the earliest instant (us) at which the firm books of
-- send s's GCRA limits all take it, the shortest interval T of its fast
-- limits (nil: none), gap, and whether it has a GCRA limit at all. A
-- limit paced at under a second a send (fast) must not be taken for an
-- instant far past its own next slot: the gap would be lost to every other
-- send on it. gap is true when a slower limit (a pair) holds the send that
-- far back: nothing is taken and the send comes back at that instant. A
-- retake's slow limits, whose slot it holds, do not hold it back.
local function firm_at(s, retake)
  local fastmax, slowmax, tmin, paced = now, now, nil, false
  for _, l in ipairs(s.gcra) do
    paced = true
    if l.fast then
      if l.firm > fastmax then fastmax = l.firm end
      if not tmin or l.T < tmin then tmin = l.T end
    elseif not retake and l.firm > slowmax then slowmax = l.firm end
  end
  return max(fastmax, slowmax), tmin, tmin ~= nil and slowmax > fastmax + tmin, paced
end

-- decide_now decides send s's other limits at now (each keeps its
-- decision in l.d) and returns blocked_wait, the longest wait (us) of those
-- that block it (0: none), and paused, true when a pause alone blocks it
-- and the send is planned for the pause's end instead of waiting.
--
-- A bulk send with GCRA limits (paced) that only a pause blocks is planned
-- for the pause's end: the scope's waiting sends then come back once each,
-- at their limits' pace, instead of all at once when the pause ends. Held
-- back by another limit too (a daily window), or high priority (it takes
-- the first free slot when the pause ends, ahead of the plan), it comes
-- back after the wait, without a place.
-- Only a pause that ends within PLAN_PAUSE_MAX: a longer one (credentials
-- refused, an operator's pause until resumed) may end early, and `channels
-- resume` or a successful probe then runs the sends that wait for it; a
-- place at its planned end would hold them back for hours.
local function decide_now(s, high, paced)
  local blocked_wait, pause_wait = 0, 0
  for _, l in ipairs(s.other) do
    local d = decide(l.algo, l.key, now, l.limit, l.period, l.burst, l.cost, l.extra)
    if not d then error('sluice: unknown algorithm ' .. tostring(l.algo)) end
    l.d = d
    if d.ok == 0 and l.algo == 'pause' then
      if d.wait > pause_wait then pause_wait = d.wait end
    elseif d.ok == 0 and d.wait > blocked_wait then
      blocked_wait = d.wait
    end
  end
  local paused = pause_wait > 0 and pause_wait <= PLAN_PAUSE_MAX and blocked_wait == 0 and not high and paced
  if pause_wait > blocked_wait and not paused then blocked_wait = pause_wait end
  return blocked_wait, paused
end

-- take_firm takes every limit of send s for instant at (a firm
-- reservation): GCRA limits in their firm books, the others by their
-- decisions. held is its place (nil: it held none). A new bulk send also
-- prefetches; take_firm returns how many extra slots it took.
local function take_firm(s, at, held, retake)
  local back = held ~= nil
  local extra = 0
  if not back then extra = prefetch(s, at) end
  for _, l in ipairs(s.gcra) do
    l.ahead_after = max(l.a, at - now) + l.T * l.cost * (1 + extra)
    if retake and not l.fast then
      -- The next send on it comes at least one interval after this one.
      gcra_store(l.key, l.extra, now, l.replace, max(l.a, at - now + l.T * l.cost))
    else
      gcra_store(l.key, l.extra, now, l.replace, l.ahead_after)
    end
  end
  for _, l in ipairs(s.other) do
    if extra > 0 and l.algo == 'fixed_window' then
      l.d.cost = l.cost * (1 + extra)
      l.d.rem_after = l.d.rem_after - l.cost * extra
    end
    commit(l.d, s.cid)
  end
  if back then
    -- One that goes in a second before its place's (it came back early:
    -- its pause was ended) gives that second's count back.
    local hsec = floor(held / SEC)
    if hsec > floor(at / SEC) then unplan(s, hsec, false) end
    unlist(s)
  else
    -- A send that was not planned takes room in its second, so that later
    -- plans count it; an idle plan starts after the firm book anyway.
    local busy = false
    for _, l in ipairs(s.gcra) do
      if l.fast and l.active then busy = true end
    end
    if busy and s.prio ~= 'retake' then plan_count(s, floor(at / SEC), false) end
  end
  return extra
end

-- reserved_second returns the first second, at or after from (us), in
-- which a displaced send s's tenant holds a reservation: on the first of
-- its active fast limits that has one; nil when none does. A reservation
-- inside a pause would bring it back paused; left unclaimed, it only
-- counts in a second the pause wastes anyway.
local function reserved_second(s, from)
  local claim
  for _, l in ipairs(s.gcra) do
    if not claim and l.fast and l.active then
      local sec = first_reserved(l, s.tenant)
      if sec then claim = sec end
    end
  end
  if claim and claim * SEC < from then claim = nil end
  return claim
end

-- replan gives send s a new place and returns it (us): a new bulk send
-- behind the plan; a send that fell behind its place (workers were down)
-- or a high-priority send beyond the hold, so that none of them is polled
-- again before it may go. A paused send gets its place from the first
-- whole second at or after the pause's end. A displaced send takes its
-- tenant's first reservation. held is its place (nil: none); plan_at and
-- plan_sec, where reserve_one already searched the plan from now.
local function replan(s, held, displaced, paused, high, plan_at, plan_sec)
  local back = held ~= nil
  local from = now
  if paused then from = pause_from(s) end
  -- Its place is past the pause's end already (it came back early).
  if paused and back and not displaced and held >= from then return held end
  local claim
  if displaced then claim = reserved_second(s, from) end
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
  return plan_at
end

-- reply appends send s's values to out: firm (firm + extra when firm, -1
-- when `at` is its place, 0 when it waits for a blocking limit), `at`,
-- then the values of each limit (see reserve.lua).
local function reply(s, out, firm, extra, at, paused, blocked_wait)
  -- -1: not firm, and `at` is the send's place (planned, or held back
  -- within the hold by a slower limit: it asks again then).
  if firm == 0 and blocked_wait == 0 then out[#out + 1] = -1 else out[#out + 1] = firm + extra end
  out[#out + 1] = ceil(at)
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then
      local ok, taken = 0, 0
      local rem = max(0, floor_units(l.tol - l.a, l.T))
      local reset = now + l.a
      if firm == 1 then
        ok, taken = 1, l.cost
        local new_ahead = l.ahead_after
        rem = max(0, floor_units(l.tol - new_ahead, l.T))
        reset = now + ceil(new_ahead)
      elseif paused or (blocked_wait > 0 and l.firm - now <= hold) then
        -- This limit alone would have allowed the send; or a pause holds it,
        -- and the pause is reported as what blocked it (its key names the
        -- tasks to run at once when the pause is ended early).
        ok = 1
      end
      out[#out + 1] = ok
      out[#out + 1] = rem
      out[#out + 1] = reset
      out[#out + 1] = ceil(max(0, l.firm - now))
      out[#out + 1] = ceil(max(0, at - now))
      out[#out + 1] = taken
    else
      -- (a pause that planned the send: its wait is to the planned place)
      if paused and l.algo == 'pause' and l.d.ok == 0 then l.d.wait = max(0, ceil(at - now)) end
      if l.d.open then out[#out + 1] = 1 else emit(out, l.d, firm == 1) end
    end
  end
end

-- reserve_one decides send s (mode "reserve") and appends its values to
-- out (see reply).
local function reserve_one(s, out)
  -- A send planned earlier takes the firm book's slot, not one behind the
  -- plan ...
  local held = held_at(s)
  local back = held ~= nil
  -- (retake: a high-priority re-take of a send's slot, already counted; it
  -- goes at the first free slot of its fast limits, and its slow limits,
  -- whose slot it holds, are only re-spaced from now)
  local retake = s.prio == 'retake'
  local high = s.prio == 'high' or retake
  pace_all(s)
  -- ... unless another tenant took its place: it pays its tenant's yield
  -- and is planned again.
  local displaced = back and unplan(s, floor(held / SEC), true)
  local at, tmin, gap, paced = firm_at(s, retake)
  local blocked_wait, paused = decide_now(s, high, paced)

  -- A new bulk send goes now only if the plan has room for it in the
  -- current second: it never overtakes sends planned before it.
  local plan_at, plan_sec
  local firm = 0
  if blocked_wait == 0 and not paused and at - now <= hold and not gap and not displaced then
    if back or high then
      firm = 1
    else
      -- Firm only where the plan puts it now: not behind sends counted in
      -- this second that have not yet come back (their slots would be lost).
      plan_at, plan_sec = plan_search(s, now)
      if plan_sec == floor(now / SEC) and plan_at <= at + (tmin or 0) then firm = 1 end
    end
  end

  local extra = 0
  if firm == 1 then
    extra = take_firm(s, at, held, retake)
  elseif blocked_wait > 0 then
    -- Blocked by a limit that cannot be reserved: come back after its wait
    -- (fixed windows count the caller among their waiters, as consume.lua).
    at = max(at, now + blocked_wait)
    for _, l in ipairs(s.other) do
      if l.d and l.d.ok == 0 and l.d.algo == 'fixed_window' and l.d.wait == blocked_wait then fixed_window_record(l.d) end
    end
  elseif not paused and (back or high) and at - now <= hold and not displaced then
    -- Within the hold, held back by a slower limit (a pair): keep the place
    -- and ask again at that instant, without taking the fast limits' slots
    -- meanwhile.
    if back then
      for _, l in ipairs(s.gcra) do
        if not l.listless then redis.call('ZADD', l.backlog, 'XX', at, s.id) end
      end
    end
  else
    at = replan(s, held, displaced, paused, high, plan_at, plan_sec)
  end
  reply(s, out, firm, extra, at, paused, blocked_wait)
end
