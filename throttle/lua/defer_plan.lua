-- defer_plan.lua: moves the plan of a paused scope past the pause's end
-- (see Redis.DeferPlanned). It is joined after prelude.lua.
--
-- A scope's planned sends (the plan book: pace.lua, plan_book.lua) are
-- scheduled in asynq for their planned seconds. When a provider throttle
-- pauses the scope, the ones planned inside the pause would each come
-- back, find it paused and be planned again: one more dequeue per send,
-- and a storm that grows the pause again and again makes it several.
-- Instead the scope's whole plan moves later by the same whole number of
-- seconds, so that its first planned send is due at or after the pause's
-- end: the sends keep their order and their pace (the spacing between any
-- two is unchanged), and the sends planned past the pause move too, so
-- that the moved ones do not crowd onto their seconds.
--
-- In a run of pauses (ARGV[4] = 1: the scope was throttled again soon
-- after the last pause ended, a storm), the first of them goes alone: it is
-- the probe, due in the pause's first
-- whole second, which is marked full on a fast limit (count PROBE_FULL),
-- and the others follow from the second after it. A storm that goes on
-- then throttles one send, not the second's worth of sends that would
-- have come back together and been held in the workers, each to be
-- planned again: the price is one second of the scope's pace per pause.
--
-- The caller then moves the asynq tasks of the returned task IDs by the
-- same shifts; a task it cannot move (already
-- forwarded, Redis lost meanwhile) comes back at its old second, finds its
-- place past the pause (firm_book.lua's replan keeps a place that is past
-- the pause's end) and is told to come back then: one dequeue more, as before.
--
-- KEYS: per limit i: KEYS[2i-1] plan hash, KEYS[2i] backlog (reserve.lua's
--   KEYS[i+1] and KEYS[i+2]: the plan and backlog of a GCRA limit keyed by
--   exactly the scope's fields)
-- ARGV[1] now us ("0" = Redis TIME)   ARGV[2] the pause's end, us
-- ARGV[3] most sends to move (larger backlogs are left as they are)
-- ARGV[4] 1: a probe goes first, alone (a run of pauses); 0: all move alike
-- ARGV[4 + i] limit i's field in its hash ('' = its own key)
-- Returns {now, the probe's shift in whole seconds (0: nothing moved), the
--   probe's task ID, then the other task IDs moved, each one second more
--   (as much as the probe when not probing);
--   shift = -1 when the backlog is larger than ARGV[3].
local SEC = 1000000
local PROBE_FULL = 1000000000
local now = clock(ARGV[1])
local till = tonumber(ARGV[2])
local most = tonumber(ARGV[3])
local probing = ARGV[4] == '1'
local nlim = #KEYS / 2

-- The first planned send still to come, across the limits' backlogs (they
-- hold the same sends; a slow limit's places may be later than a fast
-- one's).
local first, probe
for i = 1, nlim do
  local v = redis.call('ZRANGEBYSCORE', KEYS[2 * i], now, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if v[2] then
    local s = tonumber(v[2])
    if not first or s < first then first, probe = s, v[1] end
  end
end
if not first then return {now, 0} end
local from = floor(first / SEC)
local shift = ceil(till / SEC) - from
if shift <= 0 then return {now, 0} end
for i = 1, nlim do
  if redis.call('ZCOUNT', KEYS[2 * i], now, '+inf') > most then return {now, -1} end
end

local out = {now, shift, probe}
local moved = {[probe] = true}
local probe_sec = from + shift
-- Everything but the probe moves one second more.
if probing then shift = shift + 1 end
local by = shift * SEC
for i = 1, nlim do
  local plan, backlog, x = KEYS[2 * i - 1], KEYS[2 * i], ARGV[4 + i]
  local v = redis.call('ZRANGEBYSCORE', backlog, now, '+inf', 'WITHSCORES')
  local last = now
  for j = 1, #v, 2 do
    local at = tonumber(v[j + 1]) + by
    if v[j] == probe and probing then at = at - SEC end
    redis.call('ZADD', backlog, at, v[j])
    if at > last then last = at end
    if not moved[v[j]] then
      moved[v[j]] = true
      out[#out + 1] = v[j]
    end
  end
  if #v > 0 then extend(backlog, ttl_ms(last - now) + 3600000) end
  -- A fast limit's per-second counts and tenant records (fields
  -- x..'@'..sec and x..'@'..sec..'#'), from the first moved second on,
  -- last first so that none lands on one not yet moved.
  -- (one pass over the fields: the seconds, and the tenant pointers
  -- below)
  local pre = x .. '@'
  local secs = {}
  local ptr = {['f' .. x] = true}
  for _, f in ipairs(redis.call('HKEYS', plan)) do
    local p = string.sub(f, 1, 1)
    if string.sub(f, 1, #pre) == pre then
      local rest = string.sub(f, #pre + 1)
      local sec, hash = string.match(rest, '^(%d+)(#?)$')
      sec = tonumber(sec)
      if sec and sec >= from then secs[#secs + 1] = {sec, hash} end
    elseif (p == 'g' or p == 'q') and string.sub(f, 2, #x + 2) == x .. '#' then
      ptr[f] = true
    end
  end
  table.sort(secs, function(a, b) return a[1] > b[1] end)
  local lastsec
  for _, s in ipairs(secs) do
    local f = pre .. s[1] .. s[2]
    local val = redis.call('HGET', plan, f)
    redis.call('HDEL', plan, f)
    redis.call('HSET', plan, pre .. (s[1] + shift) .. s[2], val)
    if not lastsec or s[1] + shift > lastsec then lastsec = s[1] + shift end
  end
  -- The probe's second: full, so that no send is planned beside it.
  if #secs > 0 and probing then redis.call('HSET', plan, pre .. probe_sec, PROBE_FULL) end
  -- Its pointers (the fill pointer, each tenant's first second with a
  -- place and first reservation) move with the seconds they point to; a
  -- slow limit's plan tail moves with its places.
  for f in pairs(ptr) do
    local sec = tonumber(redis.call('HGET', plan, f))
    if sec and sec >= from then redis.call('HSET', plan, f, sec + shift) end
  end
  local tail = tonumber(redis.call('HGET', plan, 't' .. x))
  if tail and tail >= first then
    redis.call('HSET', plan, 't' .. x, us(tail + by))
    if tail + by > last then last = tail + by end
  end
  if lastsec and (lastsec + 2) * SEC > last then last = (lastsec + 2) * SEC end
  if redis.call('EXISTS', plan) == 1 then extend(plan, ttl_ms(last - now)) end
end
return out
