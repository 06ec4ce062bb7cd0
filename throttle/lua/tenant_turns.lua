-- tenant_turns.lua: tenants' weighted shares of a fast limit's seconds;
-- part of reserve.lua (joined after pace.lua; see there).
--
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

-- trec returns fast limit l's tenant record of second sec (tenant ->
-- {weight, count, yields, reserved}, in cost units), read from the
-- script's copy of the plan (plan_get), decoded once a script (the copy
-- keeps the table, which trec_save writes back) and kept in
-- l.recs; {} when there is none.
local function trec(l, sec)
  l.recs = l.recs or {}
  local r = l.recs[sec]
  if r then return r end
  r = {}
  if l.active then
    local f = sec_field(l.extra, sec, true)
    local raw = plan_get(l.plan, f)
    if type(raw) == 'table' then
      r = raw
    elseif raw then
      -- decoded once a script: the copy keeps the table (plan_fields)
      r = cjson.decode(raw)
      plan_cached(l.plan)[f] = r
    end
  end
  l.recs[sec] = r
  return r
end

-- trec_save writes record r of second sec back (an empty one is deleted).
local function trec_save(l, sec, r)
  local f = sec_field(l.extra, sec, true)
  if next(r) == nil then plan_del(l.plan, f) else plan_set(l.plan, f, r) end
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
    l.tp = tonumber(plan_get(l.plan, 'g' .. l.extra .. '#' .. s.tenant)) or 0
  end
  return max(floor(now / SEC), min(l.tp, l.fill))
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
  if r <= 0 or sec <= floor(now / SEC) or not l.active then return false end
  l.victim = victim(trec(l, sec), s.tenant, s.weight, l.cost)
  return l.victim ~= nil
end


-- reserve_room gives tenant u (weight w) a reservation on fast limit l: a
-- place in the first free room of a second that has not begun.
local function reserve_room(l, u, w)
  local sec = max(l.fill, floor(now / SEC) + 1)
  for _ = 1, 100000 do
    local n, r = count(l, sec), room(l, sec)
    if r > 0 and (n + l.cost <= r or n == 0) then break end
    sec = sec + 1
  end
  local n = plan_incr(l.plan, sec_field(l.extra, sec), l.cost)
  local rec = trec(l, sec)
  local v = rec[u] or {w, 0, 0, 0}
  v[2], v[4] = v[2] + l.cost, (v[4] or 0) + l.cost
  rec[u] = v
  trec_save(l, sec, rec)
  extend_later(l.plan, ttl_ms((sec + 2) * SEC - now))
  local qf = 'q' .. l.extra .. '#' .. u
  local q = tonumber(plan_get(l.plan, qf))
  if not q or sec < q then plan_set(l.plan, qf, sec) end
  advance(l, sec, n)
end

-- first_reserved returns the first second, from now on, where tenant u
-- holds a reservation on fast limit l, or nil.
local function first_reserved(l, u)
  local qf = 'q' .. l.extra .. '#' .. u
  local q = tonumber(plan_get(l.plan, qf))
  if not q then return nil end
  local sec = max(q, floor(now / SEC))
  local last = sec + 3600
  while sec <= last do
    local v = trec(l, sec)[u]
    if v and (v[4] or 0) >= l.cost then
      if sec ~= q then plan_set(l.plan, qf, sec) end
      return sec
    end
    sec = sec + 1
  end
  plan_del(l.plan, qf)
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
  plan_incr(l.plan, sec_field(l.extra, sec), -l.cost)
  if sec < l.fill then
    l.fill = sec
    plan_set(l.plan, 'f' .. l.extra, sec)
  end
end
