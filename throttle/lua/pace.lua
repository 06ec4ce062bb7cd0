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
-- l.fill, l.swept; a slow one l.queued (its earliest instant behind its
-- plan tail).

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

-- A limit's plan hash is read once a script, not once a send: the sends
-- of one plan call (up to 256 of a number) and of one reserve call read
-- the same fields (the fill and sweep pointers, a second's count and
-- tenant record, a tenant's pointer, a slow limit's tail). plan_fields
-- keeps, per plan key, each field read or written (false: absent), and
-- every read and write of a plan hash in these parts goes through the
-- functions below (write-through: Redis gets every write as before), but
-- for sweep's walk of a long-idle plan, which drops the key's copy. A
-- script is atomic, so nothing else changes the hash meanwhile.
local plan_fields = {}

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

-- plan_check fails when the copy's v of plan's field f is not what Redis
-- holds (numbers are compared as numbers: Redis keeps their text).
local function plan_check(plan, f, v)
  local r = redis.call('HGET', plan, f)
  local same
  if v == false or r == false then same = v == r else same = tostring(v) == r or tonumber(v) == tonumber(r) end
  if not same then error('sluice: plan copy stale: ' .. plan .. ' ' .. f .. ': ' .. tostring(v) .. ', Redis ' .. tostring(r)) end
end

-- plan_get is HGET plan f: a string (a number once the script wrote it:
-- the callers read it with tonumber, or it is a record's JSON), or false
-- when absent.
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
    t[f1], t[f2] = v[1], v[2]
  elseif PLAN_CHECK then
    plan_check(plan, f1, t[f1])
    plan_check(plan, f2, t[f2])
  end
  return t[f1], t[f2]
end

-- plan_set is HSET plan f v (v a string or a number).
local function plan_set(plan, f, v)
  redis.call('HSET', plan, f, v)
  plan_cached(plan)[f] = v
end

-- plan_incr is HINCRBY plan f n; it returns the new value.
local function plan_incr(plan, f, n)
  local v = redis.call('HINCRBY', plan, f, n)
  plan_cached(plan)[f] = v
  return v
end

-- plan_del is HDEL plan f...
local function plan_del(plan, ...)
  redis.call('HDEL', plan, ...)
  local t = plan_cached(plan)
  for _, f in ipairs({...}) do t[f] = false end
end

-- set_queued sets slow limit l's earliest instant behind its plan tail pt
-- (nil: none) and its firm book.
local function set_queued(l, pt)
  local pa = (pt or now) - now
  if pa < l.a then pa = l.a end
  l.queued = now + math.max(0, pa + l.T * l.cost - l.tol)
end

-- pace reads GCRA limit l's firm book and plan book into l (see above).
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
    local fv, sv = plan_get2(l.plan, 'f' .. l.extra, 's' .. l.extra)
    local f = tonumber(fv)
    -- No fill pointer: nothing is planned on the limit (the plan is idle).
    l.active = f ~= nil
    l.fill = f or 0
    l.swept = tonumber(sv) or l.fill -- first second not yet swept
  else
    set_queued(l, tonumber(plan_get(l.plan, 't' .. l.extra)))
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

-- count is the number of sends (in cost units) planned on fast limit l in
-- second sec.
local function count(l, sec)
  if not l.active then return 0 end
  return tonumber(plan_get(l.plan, l.extra .. '@' .. sec)) or 0
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
  local cur = math.floor(now / SEC)
  if not l.active then l.fill = cur; return end
  if l.swept < cur then
    if cur - l.swept <= 1000 then
      for sec = l.swept, cur - 1 do
        plan_del(l.plan, l.extra .. '@' .. sec, l.extra .. '@' .. sec .. '#')
      end
    else
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
  for _, l in ipairs(s.limits) do
    if l.algo == 'gcra' then
      pace(l)
      if l.fast then sweep(l) end
    end
  end
end
