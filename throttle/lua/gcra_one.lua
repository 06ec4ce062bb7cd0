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
local tat = (not replace and tonumber(raw)) or now
if tat < now then tat = now end
local new_tat = tat + interval * tonumber(ARGV[6])
if now < new_tat - tolerance then
  return {now, 0, math.max(0, math.floor((now - tat + tolerance) / interval + 1e-9)),
          math.ceil(tat), math.ceil(new_tat - tolerance - now)}
end
local stored = math.ceil(new_tat)
if ARGV[2] == 'consume' then
  if replace then redis.call('DEL', KEYS[1]) end
  redis.call('SET', KEYS[1], string.format('%d', stored), 'PX', math.ceil((stored - now) / 1000) + 1000)
  return {now, 1, math.max(0, math.floor((now - new_tat + tolerance) / interval + 1e-9)), stored, 0}
end
return {now, 1, math.max(0, math.floor((now - tat + tolerance) / interval + 1e-9)), stored, 0}
