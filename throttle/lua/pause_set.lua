-- pause_set.lua: pauses a scope (Redis.Pause); joined after prelude.lua.
--
-- KEYS[1] the pause hash (pause.lua)
-- ARGV[1] now us ("0" = Redis TIME)   ARGV[2] wait us (the first pause's)
-- ARGV[3] growth: each pause in a row multiplies the wait (1 = fixed)
-- ARGV[4] most wait us                ARGV[5] memory us: a pause set within
--         this long after the last one ended is "in a row"
-- A run of pauses in a row (n) lasts while no send on the scope is
-- accepted: pause_run_end.lua sets n to 0 after the first send accepted
-- once a pause ended, so the next pause is n 1, the first wait.
-- ARGV[6] code                        ARGV[7] reason
-- ARGV[8] operator: "1" for an operator's pause (`sluice channels pause`).
-- An operator's pause that is still on keeps its code, reason and flag: a
-- provider's answer to a send already in flight extends it, and never makes
-- it the provider's (which a successful credential probe would end).
-- A scope already paused stays paused at least as long as it was (answers
-- to sends that were already in flight extend, never repeat, a pause).
-- Returns {now, until us, n (pauses in a row), new (1: it was not paused)}.
local now = clock(ARGV[1])
local wait, growth, most, memory = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local v = redis.call('HMGET', KEYS[1], 'u', 'n', 'op')
local u, n = tonumber(v[1]) or 0, tonumber(v[2]) or 0
local code, reason, op = ARGV[6], ARGV[7], ARGV[8]
if u > now and v[3] == '1' and op ~= '1' then
  code, reason, op = nil, nil, '1'
end
local new = 1
if u > now then
  new = 0
  if n < 1 then n = 1 end
elseif u > 0 and now - u <= memory then
  n = n + 1
else
  n = 1
end
local w = min(most, wait * growth ^ (n - 1))
local untl = max(u, now + ceil(w))
redis.call('HSET', KEYS[1], 'u', us(untl), 'n', n, 'at', us(now), 'op', op)
if code then redis.call('HSET', KEYS[1], 'code', code, 'reason', reason) end
redis.call('PEXPIRE', KEYS[1], ttl_ms(untl - now + memory))
return {now, untl, n, new}
