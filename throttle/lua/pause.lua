-- pause.lua: a scope paused by a provider's answer (Redis.Pause): a
-- WhatsApp number after 131048, a pair after 131056, a Twilio account after
-- 20429. It is a limit with no capacity until the pause ends.
--
-- KEYS: key        hash {u = us the pause ends, n = pauses in a row (0 once
--                  a send was accepted after it: pause_run_end.lua), code,
--                  reason, at = us it was set}; see pause_set.lua
-- ARGV (per limit): nothing of its own (limit, period, burst are 0)
-- State: the hash, written by pause_set.lua, pause_end.lua and
-- pause_run_end.lua; deciding never writes, so a script reads it once.
-- Returns: see prelude.lua. Paused: ok 0, retry = wait = the rest of the
-- pause, reset = its end. Else ok 1, remaining 1. It takes nothing.
-- A script reads each pause once: it never writes one (pause_set.lua and
-- the others are scripts of their own), and the sends of a batch share
-- their account's, channel's and number's pauses.
local pause_ends, pause_open = {}, {}
local function pause_decide(key, now)
  local u = pause_ends[key]
  if not u then
    u = tonumber((read('HGET', key, 'u'))) or 0
    pause_ends[key] = u
  end
  if u <= now then
    -- Not paused: one decision a key and call, shared by the sends of a
    -- batch (d.open; nothing changes an open pause's decision).
    local d = pause_open[key]
    if not d or d.now ~= now then
      d = {algo = 'pause', key = key, now = now, taken = 0, open = true,
        ok = 1, rem_now = 1, rem_after = 1, retry = 0, reset = now, wait = 0}
      pause_open[key] = d
    end
    return d
  end
  return {algo = 'pause', key = key, now = now, taken = 0,
    ok = 0, rem_now = 0, rem_after = 0, retry = u - now, reset = u, wait = u - now}
end
