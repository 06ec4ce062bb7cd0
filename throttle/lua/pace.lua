-- pace.lua: a GCRA limit's pace and what its two books hold for a send;
-- part of reserve.lua (joined after its arguments; see there).
--
-- The firm book is the limit's own TAT (gcra.lua's state, its state key): a
-- firm reservation is an exact instant, at most `hold` us ahead. The plan
-- book (the plan hash, KEYS after the state key, and the backlog zset)
-- holds the sends told to come back later. A limit paced slower than one
-- send a second (a pair limit, a 1/s sender) keeps a plan tail: PTAT,
-- field 't'..extra. A faster one keeps a count per future whole second
-- (fields extra..'@'..second) and a fill pointer (field 'f'..extra, the
-- first second that may have room): asynq schedules in whole seconds, so a
-- second's count is the number of sends that will come back in it. Second
-- s holds floor((s+1)R) - floor(sR) sends, R = 1e6/T per second, so the
-- seconds average the paced rate. A send planned later than the pointer
-- (held back by another limit) takes room in its own second without moving
-- the pointer, and a gap it leaves is filled by later plans. Field
-- 's'..extra is the first second not yet swept.
--
-- pace sets on a limit l: l.T (emission interval, us), l.tol (burst
-- tolerance, us), l.a (how far its TAT is ahead of now, us), l.replace,
-- l.firm (its earliest instant by the firm book), l.fast (T < 1s); a fast
-- limit also l.rate (sends a second), l.active (its plan is not idle),
-- l.fill, l.swept. A slow limit's l.queued (its earliest instant behind
-- its plan tail) is set by queued (below) or leave (plan_book.lua), not by
-- pace.

-- extend_later is prelude.lua's extend at the script's end (flush_extends,
-- reserve.lua; only that script plans, so only it carries these): a script that
-- plans 256 sends on one number's books extends each book once, to the
-- longest lifetime any send needed, not once a send (a PTTL and a PEXPIRE
-- each). ms is counted from the script's now, the same for every call. A
-- script that calls it must call flush_extends on every way out, an error
-- included (reserve.lua runs its body under pcall): a key it created would
-- otherwise never expire.
local extend_to = {}
local function extend_later(key, ms)
  local cur = extend_to[key]
  if not cur or ms > cur then extend_to[key] = ms end
end

-- flush_extends applies the extend_later calls: each key then lives at
-- least the longest ms asked for it (a key deleted meanwhile stays deleted).
local function flush_extends()
  for key, ms in pairs(extend_to) do extend(key, ms) end
  extend_to = {}
end

-- A limit's plan hash is read once a script, not once a send, and written
-- once a script too: the sends of one plan call (up to 256 of a number)
-- and of one reserve call read and write the same fields (the fill and
-- sweep pointers, a second's count and tenant record, a tenant's pointer,
-- a slow limit's tail). plan_fields keeps, per plan key, each field read
-- or written (false: absent; a tenant record decoded as a table), and
-- every read and write of a plan hash in these parts goes through the
-- functions below. Writes are kept (plan_dirty) and reach Redis at the
-- script's end (flush_plans, before flush_extends: a plan the flush
-- creates then gets its TTL), but for sweep's walk of a long-idle plan,
-- which flushes the key's writes and drops its copy. A script is atomic,
-- so nothing else reads or changes the hash meanwhile. A script that
-- writes a plan must call flush_plans on every way out, an error
-- included (reserve.lua runs its body under pcall), as flush_extends.
local plan_fields, plan_dirty = {}, {}

-- PLAN_CHECK has every read the copy answers checked against Redis (an
-- error names a field the copy got wrong): the package's tests turn it on
-- for every script they run (TestMain in throttle).
local PLAN_CHECK = false

local function plan_cached(plan)
  local t = plan_fields[plan]
  if not t then
    t = {}
    plan_fields[plan] = t
  end
  return t
end

-- same_value reports whether a and b (numbers, strings, tables of them)
-- are equal, tables by their contents.
local function same_value(a, b)
  if type(a) ~= 'table' or type(b) ~= 'table' then return a == b end
  for k, v in pairs(a) do
    if not same_value(v, b[k]) then return false end
  end
  for k in pairs(b) do
    if a[k] == nil then return false end
  end
  return true
end

-- plan_check fails when the copy's v of plan's field f is not what Redis
-- holds (numbers are compared as numbers: Redis keeps their text). A
-- field written in this script is not in Redis yet, and a record decoded
-- is checked as its JSON.
local function plan_check(plan, f, v)
  local d = plan_dirty[plan]
  if d and d[f] then return end
  local r = redis.call('HGET', plan, f)
  local same
  if type(v) == 'table' then
    same = r ~= false and same_value(v, cjson.decode(r))
  elseif v == false or r == false then
    same = v == r
  else
    same = tostring(v) == r or tonumber(v) == tonumber(r)
  end
  if not same then error('sluice: plan copy stale: ' .. plan .. ' ' .. f .. ': ' .. tostring(v) .. ', Redis ' .. tostring(r)) end
end

-- plan_get is HGET plan f: a string (a number once the script wrote it:
-- the callers read it with tonumber; a tenant record a table once trec
-- decoded it), or false when absent.
local function plan_get(plan, f)
  local t = plan_cached(plan)
  local v = t[f]
  if v == nil then
    v = redis.call('HGET', plan, f)
    t[f] = v
  elseif PLAN_CHECK then
    plan_check(plan, f, v)
  end
  return v
end

-- plan_get2 is HMGET plan f1 f2, one round trip for what is not kept yet.
local function plan_get2(plan, f1, f2)
  local t = plan_cached(plan)
  if t[f1] == nil or t[f2] == nil then
    local v = redis.call('HMGET', plan, f1, f2)
    if t[f1] == nil then t[f1] = v[1] end
    if t[f2] == nil then t[f2] = v[2] end
  elseif PLAN_CHECK then
    plan_check(plan, f1, t[f1])
    plan_check(plan, f2, t[f2])
  end
  return t[f1], t[f2]
end

-- plan_keep notes field f of plan as written.
local function plan_keep(plan, f)
  local d = plan_dirty[plan]
  if not d then
    d = {}
    plan_dirty[plan] = d
  end
  d[f] = true
end

-- plan_set is HSET plan f v (v a string, a number, or a tenant record).
local function plan_set(plan, f, v)
  plan_cached(plan)[f] = v
  plan_keep(plan, f)
end

-- plan_incr is HINCRBY plan f n; it returns the new value.
local function plan_incr(plan, f, n)
  local v = (tonumber(plan_get(plan, f)) or 0) + n
  plan_set(plan, f, v)
  return v
end

-- plan_del is HDEL plan f...
local function plan_del(plan, ...)
  local t = plan_cached(plan)
  for _, f in ipairs({...}) do
    t[f] = false
    plan_keep(plan, f)
  end
end

-- flush_plan writes plan's kept writes to Redis: one HSET and one HDEL
-- (a few hundred fields a command at most).
local function flush_plan(plan)
  local d = plan_dirty[plan]
  if not d then return end
  plan_dirty[plan] = nil
  local t = plan_fields[plan]
  local set, del = {}, {}
  for f in pairs(d) do
    local v = t[f]
    if v == false then
      del[#del + 1] = f
    else
      if type(v) == 'table' then v = cjson.encode(v) end
      set[#set + 1] = f
      set[#set + 1] = v
    end
  end
  for i = 1, #set, 400 do redis.call('HSET', plan, unpack(set, i, min(i + 399, #set))) end
  for i = 1, #del, 200 do redis.call('HDEL', plan, unpack(del, i, min(i + 199, #del))) end
end

-- flush_plans writes every plan's kept writes (see above).
local function flush_plans()
  for plan in pairs(plan_dirty) do flush_plan(plan) end
end

-- set_queued sets slow limit l's earliest instant behind its plan tail pt
-- (nil: none) and its firm book.
local function set_queued(l, pt)
  local pa = (pt or now) - now
  if pa < l.a then pa = l.a end
  l.queued = now + max(0, pa + l.T * l.cost - l.tol)
end

-- plan_firms keeps, in "plan", a fast limit's firm book as read (per key
-- and field, {raw, wrong}): nothing in "plan" writes a firm book, and the
-- sends of a plan call (up to 256 of one channel, usually of one number)
-- share their number's. A slow limit's (a pair's) is read again: a call's
-- sends share few, and a copy per pair costs more than the read. With
-- PLAN_CHECK (the package's tests) every read of the copy is checked
-- against Redis.
local plan_firms, planning = {}, mode == 'plan'

-- firm_read reads GCRA limit l's firm book: its TAT's text (nil when
-- absent), and true when the key holds another algorithm's state.
local function firm_read(l)
  if l.extra == '' then return read('GET', l.key) end
  return read('HGET', l.key, l.extra)
end

-- pace reads GCRA limit l's firm book and plan book into l (see above).
-- (Outside the copy it reads the book itself rather than by firm_read:
-- a function call a send, in every reserve, costs more than the line.)
local function pace(l)
  local T = (l.period / l.limit) / (1 - headroom)
  local tol = T * l.burst
  local raw, wrong
  if not planning or T >= SEC then
    if l.extra == '' then raw, wrong = read('GET', l.key) else raw, wrong = read('HGET', l.key, l.extra) end
  else
    local c = plan_firms[l.key]
    if not c then
      c = {}
      plan_firms[l.key] = c
    end
    local v = c[l.extra]
    if not v then
      v = {firm_read(l)}
      c[l.extra] = v
    elseif PLAN_CHECK then
      local r, w = firm_read(l)
      if r ~= v[1] or w ~= v[2] then error('sluice: firm book copy stale: ' .. l.key .. ' ' .. l.extra) end
    end
    raw, wrong = v[1], v[2]
  end
  local a = (tonumber(raw) or now) - now
  if a < 0 then a = 0 end
  l.T, l.tol, l.a, l.replace = T, tol, a, wrong
  l.firm = now + max(0, a + T * l.cost - tol) -- earliest by the firm book
  l.fast = T < SEC
  if l.fast then
    l.rate = SEC / T
    local fv, sv = plan_get2(l.plan, 'f' .. l.extra, 's' .. l.extra)
    local f = tonumber(fv)
    -- No fill pointer: nothing is planned on the limit (the plan is idle).
    l.active = f ~= nil
    l.fill = f or 0
    l.swept = tonumber(sv) or l.fill -- first second not yet swept
  end
  -- (a slow limit's l.queued is read when a plan needs it: queued)
end

-- queued returns slow limit l's earliest instant behind its plan tail,
-- reading the tail the first time a send asks: a send that comes back to
-- its place and goes needs none.
local function queued(l)
  if not l.queued then set_queued(l, tonumber(plan_get(l.plan, 't' .. l.extra))) end
  return l.queued
end

-- sec_field returns the plan field of a fast limit's count in second sec,
-- extra..'@'..sec, or with rec its tenant record's (..'#'), made once a
-- call: a number turned into text costs more than the lookup, and the
-- sends of a call share a few seconds.
local sec_fields, rec_fields = {}, {}
local function sec_field(extra, sec, rec)
  local by = sec_fields
  if rec then by = rec_fields end
  local c = by[extra]
  if not c then
    c = {}
    by[extra] = c
  end
  local f = c[sec]
  if not f then
    f = extra .. '@' .. sec
    if rec then f = f .. '#' end
    c[sec] = f
  end
  return f
end

-- room is second sec's share of the paced rate; the current second only
-- has what is left of it, so a campaign planned at 12.6s does not put a
-- whole second's sends into its last 0.4s and push the firm book ahead.
-- The plan starts where the firm book ends: sends taken without a plan
-- are counted only there.
local function room(l, sec)
  local start = now + (l.a or 0)
  local first = floor(start / SEC)
  if sec < first then return 0 end
  local from = sec * l.rate
  if sec == first then from = (start / SEC) * l.rate end
  return floor((sec + 1) * l.rate) - floor(from)
end

-- count is the number of sends (in cost units) planned on fast limit l in
-- second sec.
local function count(l, sec)
  if not l.active then return 0 end
  return tonumber(plan_get(l.plan, sec_field(l.extra, sec))) or 0
end

-- advance moves fast limit l's fill pointer past the seconds that are full
-- from sec (the pointer's second) on.
local function advance(l, sec, n)
  if sec ~= l.fill then return end
  while n >= room(l, l.fill) do
    l.fill = l.fill + 1
    n = count(l, l.fill)
  end
  plan_set(l.plan, 'f' .. l.extra, l.fill)
end

-- sweep drops the past seconds of a fast limit's plan, from the first not
-- yet swept (the fill pointer may have passed seconds that later plans
-- still counted in) up to now, and moves the fill pointer to now.
local function sweep(l)
  local cur = floor(now / SEC)
  if not l.active then l.fill = cur; return end
  if l.swept < cur then
    if cur - l.swept <= 1000 then
      for sec = l.swept, cur - 1 do
        plan_del(l.plan, sec_field(l.extra, sec), sec_field(l.extra, sec, true))
      end
    else
      flush_plan(l.plan) -- (the walk reads Redis)
      local pre = l.extra .. '@'
      for _, f in ipairs(redis.call('HKEYS', l.plan)) do
        if string.sub(f, 1, #pre) == pre then
          local sec = tonumber((string.gsub(string.sub(f, #pre + 1), '#$', '')))
          if sec and sec < cur then redis.call('HDEL', l.plan, f) end
        end
      end
      plan_fields[l.plan] = nil -- read again from Redis
    end
    l.swept = cur
    plan_set(l.plan, 's' .. l.extra, cur)
  end
  if l.fill < cur then
    l.fill = cur
    plan_set(l.plan, 'f' .. l.extra, cur)
  end
end

-- pace_all paces every GCRA limit of send s, and sweeps the fast ones.
local function pace_all(s)
  for _, l in ipairs(s.gcra) do
    pace(l)
    if l.fast then sweep(l) end
  end
end
