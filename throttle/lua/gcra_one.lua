-- gcra_one.lua: the fast path for the commonest call, one GCRA limit on a
-- key of its own. It is gcra.lua's decide and commit inlined, with no
-- tables or closures, because Redis runs a script's whole chunk on every
-- call; the generic script (consume.lua) decides any other call.
-- TestGCRAFastPathMatchesGenericScript holds the two to the same decisions.
--
-- KEYS[1]: string holding the theoretical arrival time (TAT, us)
-- ARGV: now (us; "0" = Redis TIME), mode ("consume" | "check"), limit,
--       period us, burst, cost
-- Returns: {now, allowed, remaining, reset us, retry_after us}, as
-- consume.lua's first limit (wait = retry_after).
local now = tonumber(ARGV[1])
if now == 0 then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local interval = tonumber(ARGV[4]) / tonumber(ARGV[3])
local tolerance = interval * tonumber(ARGV[5])
local raw = redis.pcall('GET', KEYS[1])
local replace = type(raw) == 'table'
local ahead = ((not replace and tonumber(raw)) or now) - now
if ahead < 0 then ahead = 0 end
local new_ahead = ahead + interval * tonumber(ARGV[6])
if new_ahead > tolerance then
  return {now, 0, math.max(0, math.floor((tolerance - ahead) / interval + 1e-9)),
          now + ahead, math.ceil(new_ahead - tolerance)}
end
if ARGV[2] == 'consume' then
  local stored = now + math.ceil(new_ahead)
  if replace then redis.call('DEL', KEYS[1]) end
  redis.call('SET', KEYS[1], string.format('%d', stored), 'PX', math.ceil((stored - now) / 1000) + 1000)
  return {now, 1, math.max(0, math.floor((tolerance - new_ahead) / interval + 1e-9)), stored, 0}
end
return {now, 1, math.max(0, math.floor((tolerance - ahead) / interval + 1e-9)), now + ahead, 0}
