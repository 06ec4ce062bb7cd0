-- pause_end.lua: ends a pause now (Redis.Resume); joined after prelude.lua.
--
-- KEYS[1] the pause hash   KEYS[2] its probe record   KEYS[3] the probe lock
-- ARGV[1] now us ("0" = Redis TIME)   ARGV[2] memory us
-- The pause's hash stays for memory with its end set to now, so a pause
-- of the same scope soon after counts in a row (pause_set.lua): a scope
-- that an operator or a probe resumed and that is refused again at once is
-- told apart from a first refusal. The probe record and lock go.
-- Returns the end the pause had (us), 0 when there was none.
local now = clock(ARGV[1])
local u = tonumber(redis.call('HGET', KEYS[1], 'u')) or 0
redis.call('DEL', KEYS[2], KEYS[3])
if u == 0 then return 0 end
if u > now then
  redis.call('HSET', KEYS[1], 'u', us(now), 'op', '0')
end
redis.call('PEXPIRE', KEYS[1], ttl_ms(tonumber(ARGV[2])))
return u
