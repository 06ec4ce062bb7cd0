-- firm_fast.lua: "reserve" and "plan" of the common send, lean. Part of
-- reserve.lua (joined after firm_book.lua; see there).
--
-- Most sends a worker reserves are bulk sends planned earlier that come
-- back to their places and go: every pause open, every other limit has
-- room, the firm books take them within the hold, no slower limit (a
-- pair) holds them back, and their tenant owes no yield in their second.
-- reserve_one decides such a send through the general parts (parse, pace,
-- unplan, firm_at, decide_now, take_firm, reply): some 500 lines of Lua
-- and a dozen tables a send, which cost Redis more than the send's
-- commands (docs/pacing.md, "The common send, lean"). fast_one decides it
-- with the same reads and writes in a few tables reused from send to
-- send, and reserve_one decides every other send: fast_one looks at the
-- send, and where any of the above does not hold it returns nil before it
-- writes anything to Redis (its reads, and the sweep of a fast limit's
-- plan, leave the script's copies as reserve_one's own would), so
-- reserve_one then decides the send from the start. The outcome is
-- reserve_one's in every case, reply included;
-- TestFastPathDecidesAsTheGeneralOne runs campaigns both ways (FAST_PATH)
-- and compares every reply and every key.

-- FAST_PATH turns fast_one and plan_fast on; the package's parity test
-- turns them off, and names in FAST_COUNT a key that counts the sends
-- fast_one decides (and FAST_COUNT..':plan' those plan_fast plans).
local FAST_PATH = true
local FAST_COUNT = false

-- fg holds, per GCRA limit of the send (in its order among them), a table
-- reused by the next send: the fields parse gives a limit (key, plan,
-- backlog, extra, limit, period, burst, cost), its spec p, listless, and
-- after (ahead once taken). It is pace's l (pace.lua sets T, tol, a,
-- firm, fast and a fast limit's plan pointers afresh each send), and a
-- fast limit's is sweep's and trec's too (recs cleared each send). In
-- "plan" (plan_fast) it is also plan_search's and plan_count's, which
-- set queued, tp, victim and n lazily: plan_fast clears them each send.
-- fo holds, per limit in the request's order, its GCRA table or its
-- decision (a decision has .algo, a GCRA table not).
local fg, fo = {}, {}

-- fg_limit returns fg's table ng, made the send's GCRA limit at key index
-- i with spec p: the fields parse gives a limit but algo (a table in fo
-- without one is a GCRA limit's; the parts plan_fast calls read it only on
-- other limits).
local function fg_limit(ng, i, p)
  local g = fg[ng]
  if not g then
    g = {}
    fg[ng] = g
  end
  g.key, g.plan, g.backlog, g.p, g.extra = KEYS[i], KEYS[i + 1], KEYS[i + 2], p, p.extra
  g.limit, g.period, g.burst, g.cost = p.limit, p.period, p.burst, p.cost
  return g
end

-- fast_one decides the send at ARGV index a if it is the common case above
-- and appends its values to out (as reply, firm): it returns the next
-- send's index; nil when reserve_one must decide it (nothing written).
local function fast_one(a, out)
  if ARGV[a + 1] ~= 'bulk' then return nil end
  local id = ARGV[a]
  if id == '' then return nil end
  local m = ARGV[a + 5] + 0
  local b = a + 6
  -- The send's limits: GCRA ones into fg, the others decided now.
  local ng, fast = 0, false
  for j = 1, m do
    local ref, p = ARGV[b], specs[ARGV[b + 1]]
    if p.algo == 'gcra' then
      ng = ng + 1
      local g = fg_limit(ng, ref + 0, p)
      if p.fast then fast = true end
      fo[j] = g
    else
      local d = decide(p.algo, KEYS[ref + 0], now, p.limit, p.period, p.burst, p.cost, p.extra)
      if not d or d.ok == 0 then return nil end
      fo[j] = d
    end
    b = b + 2
  end
  if not fast then return nil end
  -- Its place (held_at, inline: its call and ipairs cost a reserved send
  -- about 1%; make bench-scripts): the latest of its entries; the
  -- listless limits (parse) keep none.
  local held
  for k = 1, ng do
    local g = fg[k]
    g.listless = g.p.long and not g.p.fast
    if not g.listless then
      local at = tonumber(redis.call('ZSCORE', g.backlog, id))
      if at and (not held or at > held) then held = at end
    end
  end
  if not held then return nil end
  -- The firm books (pace, firm_at); a fast limit's sweep. A key of
  -- another algorithm (pace's replace) is reserve_one's.
  local fastmax, slowmax, tmin = now, now, nil
  local tenant, hsec = ARGV[a + 3], floor(held / SEC)
  for k = 1, ng do
    local g = fg[k]
    pace(g)
    if g.replace then return nil end
    if g.fast then
      if g.firm > fastmax then fastmax = g.firm end
      if not tmin or g.T < tmin then tmin = g.T end
      g.recs = nil
      sweep(g)
      -- (unplan, pay_only: its tenant owes no yield in its second)
      if g.active then
        local v = trec(g, hsec)[tenant]
        if v and v[3] >= g.cost then return nil end
      end
    elseif g.firm > slowmax then
      slowmax = g.firm
    end
  end
  local at = max(fastmax, slowmax)
  -- Held back (a pair: gap), beyond the hold, or come back early (its
  -- second's count is given back: take_firm's unplan): reserve_one.
  if slowmax > fastmax + tmin or at - now > hold or hsec > floor(at / SEC) then return nil end
  -- Firm (take_firm, unlist, reply).
  local cid = ARGV[a + 2]
  for k = 1, ng do
    local g = fg[k]
    g.after = max(g.a, at - now) + g.T * g.cost
    gcra_store(g.key, g.extra, now, false, g.after)
  end
  for j = 1, m do
    local d = fo[j]
    if d.algo then commit(d, cid) end
  end
  for k = 1, ng do
    local g = fg[k]
    if not g.listless then redis.call('ZREM', g.backlog, id) end
  end
  if FAST_COUNT then redis.call('INCR', FAST_COUNT) end
  out[#out + 1] = 1
  out[#out + 1] = ceil(at)
  local wait = ceil(max(0, at - now))
  for j = 1, m do
    local d = fo[j]
    if d.algo then
      if d.open then out[#out + 1] = 1 else emit(out, d, true) end
    else
      out[#out + 1] = 1
      out[#out + 1] = max(0, floor_units(d.tol - d.after, d.T))
      out[#out + 1] = now + ceil(d.after)
      out[#out + 1] = ceil(max(0, d.firm - now))
      out[#out + 1] = wait
      out[#out + 1] = d.cost
    end
  end
  return b
end

-- fp is the send plan_fast hands plan_search and plan_commit, reused from
-- send to send: its GCRA limits (fp.gcra, fg's tables), id, tenant and
-- weight.
local fp = {gcra = {}}

-- plan_fast plans the send at ARGV index a ("plan") as plan_one would, when
-- it is the common case: it holds no place yet and no pause holds it. It
-- appends its two values to out and returns the next send's index; nil
-- when plan_one must plan it (nothing written: its reads, its pauses'
-- HGETs and its backlogs' ZSCOREs, come before any write). It is plan_one
-- without parse's tables, a sixth fewer instructions a planned send
-- (docs/pacing.md, "The plan, lean, and what a script call costs"): a
-- send's limits are fg's tables, reset, and pace, sweep, plan_search and
-- plan_commit are plan_one's own. TestFastPathDecidesAsTheGeneralOne plans
-- both ways too.
local function plan_fast(a, out)
  local id = ARGV[a]
  local m = ARGV[a + 5] + 0
  local b = a + 6
  local gl, ng, fast = fp.gcra, 0, false
  for _ = 1, m do
    local ref, p = ARGV[b], specs[ARGV[b + 1]]
    if p.algo == 'gcra' then
      ng = ng + 1
      local g = fg_limit(ng, ref + 0, p)
      g.queued, g.tp, g.recs, g.victim, g.n = nil, nil, nil, nil, nil
      gl[ng] = g
      if p.fast then fast = true end
    elseif p.algo == 'pause' then
      -- (pause_from: a paused send is plan_one's)
      if pause_decide(KEYS[ref + 0], now).ok == 0 then return nil end
    end
    b = b + 2
  end
  for k = #gl, ng + 1, -1 do gl[k] = nil end
  -- Its place (held_at, inline as in fast_one): a send that holds one is
  -- plan_one's.
  for k = 1, ng do
    local g = gl[k]
    g.listless = fast and g.p.long and not g.p.fast
    if id ~= '' and not g.listless and redis.call('ZSCORE', g.backlog, id) then return nil end
  end
  fp.id, fp.tenant, fp.weight = id, ARGV[a + 3], ARGV[a + 4] + 0
  -- (pace_all, inline: with held_at's, 2% of a planned send)
  for k = 1, ng do
    local g = gl[k]
    pace(g)
    if g.fast then sweep(g) end
  end
  local at, sec = plan_search(fp, now)
  plan_commit(fp, at, sec, false)
  if FAST_COUNT then redis.call('INCR', FAST_COUNT .. ':plan') end
  out[#out + 1] = at
  out[#out + 1] = 1
  return b
end
