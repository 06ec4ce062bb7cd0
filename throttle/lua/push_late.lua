-- push_late.lua: a paced send left late (Redis.PushAfterLate). Joined
-- after prelude.lua and gcra.lua.
--
-- A GCRA limit paced at interval T = period / limit / (1 - headroom) spaces
-- a limit's worth of sends over period / (1 - headroom): period plus a
-- margin M = period * headroom / (1 - headroom) (15.2ms a second at 1.5%).
-- A strict provider counts limit + 1 in one period when a send arrives more
-- than M later, relative to its slot, than the send a limit's worth after
-- it. So once a send has left late by L > M, every firm slot taken after
-- it moves on by L - M: its firm book's TAT, at least the send's own slot
-- plus its interval (the TAT may have expired), grows by that much. Slots
-- already taken stay; the sends in them come before the limit's worth
-- after the late one.
--
-- KEYS: per GCRA limit its state key (the firm book).
-- ARGV[1] now us ("0" = Redis TIME)  ARGV[2] the late send's slot us
-- ARGV[3] how late it left, us        ARGV[4] headroom (fraction)
-- then per key: limit, period us, cost, field ('' or its name in a shared
-- hash, as gcra.lua).
-- Returns: now us, then per key how far its slots moved, us (0: not late
-- for it, or the key holds another algorithm's state).
local now = clock(ARGV[1])
local slot, late, headroom = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {now}
for i, key in ipairs(KEYS) do
  local a = 5 + (i - 1) * 4
  local limit, period, cost, field = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), ARGV[a + 3]
  local push = late - period * headroom / (1 - headroom)
  out[i + 1] = 0
  if push > 0 then
    local raw, wrong
    if field == '' then raw, wrong = read('GET', key) else raw, wrong = read('HGET', key, field) end
    if not wrong then
      local T = period / limit / (1 - headroom)
      local tat = math.max(tonumber(raw) or 0, slot + T * cost)
      gcra_store(key, field, now, false, math.max(0, tat + push - now))
      out[i + 1] = math.ceil(push)
    end
  end
end
return out
