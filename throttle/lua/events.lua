-- events.lua: append a limiter event to the capped events stream, at most
-- once per key, type and window across all processes.
--
-- KEYS[1]: the stream; KEYS[2]: the marker "<type>:<key>" (same hash tag)
-- ARGV[1]: marker lifetime, ms (the rest of the window)
-- ARGV[2]: the stream's approximate maximum length (XADD MAXLEN ~)
-- ARGV[3...]: the entry's field/value pairs
-- Returns: the entry id, or false when the event was already emitted.
if not redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[1]) then return false end
local entry = {}
for i = 3, #ARGV do entry[#entry + 1] = ARGV[i] end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*', unpack(entry))
-- Like every Sluice key the stream has a TTL: a week after the last event.
redis.call('PEXPIRE', KEYS[1], 604800000)
return id
