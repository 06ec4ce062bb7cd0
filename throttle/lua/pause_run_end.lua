-- pause_run_end.lua: ends a scope's run of pauses (Redis.EndPauseRun) after
-- the provider accepted a send on it; joined after prelude.lua.
--
-- KEYS[1] the pause hash (pause.lua; n is the pauses in a row)
-- ARGV[1] now us ("0" = Redis TIME)
-- A run is the pauses set with no accepted send between them: pause_set.lua
-- grows each pause of a run (n) and starts over at the first wait when n is
-- 0. This sets n to 0, and only once the pause has ended (u <= now): a scope
-- paused again since the send (another process's throttle) keeps its run,
-- so the answer to a send that was in flight cannot shorten a pause that is
-- on. The pause's end, code and reason, and the hash's TTL, stay: the
-- workers call it once per pause each, never on the common path.
-- Returns 1 when a run was ended (n was over 0), else 0 (no pause hash, a
-- pause still on, or a run already ended).
local now = clock(ARGV[1])
local v = redis.call('HMGET', KEYS[1], 'u', 'n')
local u, n = tonumber(v[1]), tonumber(v[2]) or 0
if not u or u > now or n <= 0 then return 0 end
redis.call('HSET', KEYS[1], 'n', 0)
return 1
