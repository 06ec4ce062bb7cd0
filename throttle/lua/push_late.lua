-- push_late.lua: a paced send left late (Redis.PushAfterLate). Joined
-- after prelude.lua and gcra.lua.
--
-- A GCRA limit paced at interval T = period / limit / (1 - headroom) spaces
-- a limit's worth of sends over period / (1 - headroom): period plus a
-- margin M = period * headroom / (1 - headroom) (15.2ms a second at 1.5%).
-- A strict provider counts limit + 1 in one period when a send arrives more
-- than M later, relative to its slot, than the send a limit's worth after
-- it (with the send after it late too, where M is wider than T). So once a
-- send has left late by L > M, every slot after it moves on by L - M: the
-- firm book's TAT (at least the send's own slot plus its interval: the TAT
-- may have expired) grows by that much for the slots taken from now on,
-- and the push is announced (PUBLISH) for those workers hold already.
--
-- Pushes made after the late send's slot was taken, for sends before it,
-- have moved the slot a limit's worth after it already (each limit keeps
-- them in a ledger, its pushes of the last LEDGER_US): only what they left
-- is pushed. Without that, the sends of one stall, late together, would
-- each push their whole lateness.
--
-- KEYS: per GCRA limit its state key (the firm book), then its ledger (a
-- zset of "slot:pushed:now:field" members scored by when they were pushed;
-- GCRA limits sharing a key as hash fields keep their pushes apart).
-- ARGV[1] now us ("0" = Redis TIME)   ARGV[2] the late send's slot us, as
--   first taken (before any hold for a push)
-- ARGV[3] how late it left after that slot, us
-- ARGV[4] headroom (fraction)         ARGV[5] when its slot was taken, us
--   (the reservation's now; 0: unknown, nothing is deducted)
-- ARGV[6] the announcement channel
-- then per limit: limit, period us, cost, field ('' or its name in a
-- shared hash, as gcra.lua), name (the key without its prefix).
-- Returns: now us, then per limit how far its slots moved, us (0: not late
-- for it, covered by earlier pushes, or the key holds another algorithm's
-- state).
local LEDGER_US = 30000000
local now = clock(ARGV[1])
local slot, late, headroom, taken = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local channel = ARGV[6]
local out = {now}
for i = 1, #KEYS / 2 do
  local key, ledger = KEYS[2 * i - 1], KEYS[2 * i]
  local a = 7 + (i - 1) * 5
  local limit, period, cost, field, name = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]), ARGV[a + 3], ARGV[a + 4]
  local push = late - period * headroom / (1 - headroom)
  if push > 0 and taken > 0 then
    for _, m in ipairs(redis.call('ZRANGEBYSCORE', ledger, '(' .. us(taken), '+inf')) do
      local s, p, f = string.match(m, '^(%d+):(%d+):%d+:(.*)$')
      if s and f == field and tonumber(s) < slot then push = push - tonumber(p) end
    end
  end
  out[i + 1] = 0
  if push > 0 then
    local raw, wrong
    if field == '' then raw, wrong = read('GET', key) else raw, wrong = read('HGET', key, field) end
    if not wrong then
      local T = period / limit / (1 - headroom)
      local tat = max(tonumber(raw) or 0, slot + T * cost)
      push = ceil(push)
      gcra_store(key, field, now, false, max(0, tat + push - now))
      redis.call('ZADD', ledger, now, us(slot) .. ':' .. push .. ':' .. us(now) .. ':' .. field)
      redis.call('ZREMRANGEBYSCORE', ledger, '-inf', '(' .. us(now - LEDGER_US))
      redis.call('PEXPIRE', ledger, ttl_ms(LEDGER_US))
      redis.call('PUBLISH', channel, push .. ' ' .. us(now) .. ' ' .. us(slot) .. ' ' .. name)
      out[i + 1] = push
    end
  end
end
return out
