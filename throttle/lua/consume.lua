-- consume.lua: check, and in "consume" mode take, several limits at once,
-- all or nothing; in "refund" mode give back what a consume took.
--
-- KEYS[i]: the state key of limit i (all keys share one {hash tag}).
-- ARGV[1]: now, us since the epoch; "0" = use Redis TIME (one clock for all
--          workers). A refund passes the consume's own now.
-- ARGV[2]: mode: "consume" takes the cost from every limit only if all
--          allow; "check" takes nothing; "refund" gives back each limit's
--          cost (the units the consume reported as taken)
-- ARGV[3]: call id: unique per call; names sliding-log entries and leases
-- ARGV[4 + 6*(i-1) ...]: limit i as: algorithm, limit, period us (lease us
--          for concurrency, interval us for min_interval), burst, cost,
--          extra (gcra: '' or the field in a shared hash; distinct: member)
-- Returns: {now_us, allowed (1|0: every limit had room; in consume mode the
--           cost was then taken), then per limit i: ok (1|0), remaining,
--           reset (us since epoch), retry_after (us), wait (us, >=
--           retry_after: when a blocked caller should come back), taken
--           (units the commit took; 0 unless committed)}
-- remaining is after the call when committed, else what is available now.
local now = clock(ARGV[1])
local mode = ARGV[2]
local call_id = ARGV[3]
local n = #KEYS
if #ARGV ~= 3 + 6 * n then
  return redis.error_reply('sluice: want ' .. (3 + 6 * n) .. ' ARGV for ' .. n .. ' keys, got ' .. #ARGV)
end

if mode == 'refund' then
  for i = 1, n do
    local a = 3 + 6 * (i - 1)
    local algo, key = ARGV[a + 1], KEYS[i]
    local limit, period, cost = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3]), tonumber(ARGV[a + 5])
    if algo == 'gcra' then gcra_refund(key, ARGV[a + 6], now, limit, period, cost)
    elseif algo == 'fixed_window' then window_refund(key, now, period, cost)
    elseif algo == 'sliding_window_log' then sliding_window_log_refund(key, cost, call_id)
    elseif algo == 'sliding_window_counter' then window_refund(key, now, period, cost)
    elseif algo == 'min_interval' then min_interval_refund(key, now)
    elseif algo == 'concurrency' then concurrency_refund(key, cost, call_id)
    elseif algo == 'distinct' then distinct_refund(key, now, ARGV[a + 6], cost)
    end
  end
  return {now, 1}
end

local decisions = {}
local all_ok = 1
for i = 1, n do
  local a = 3 + 6 * (i - 1)
  local algo, key = ARGV[a + 1], KEYS[i]
  local limit, period = tonumber(ARGV[a + 2]), tonumber(ARGV[a + 3])
  local burst, cost, extra = tonumber(ARGV[a + 4]), tonumber(ARGV[a + 5]), ARGV[a + 6]
  local d = decide(algo, key, now, limit, period, burst, cost, extra)
  if not d then return redis.error_reply('sluice: unknown algorithm ' .. tostring(algo)) end
  if d.ok == 0 then all_ok = 0 end
  decisions[i] = d
end

local committed = mode == 'consume' and all_ok == 1
if committed then
  for i = 1, n do commit(decisions[i], call_id) end
end
-- A blocked caller waits for its slowest limit; only that limit counts it
-- as a waiter (fixed windows), so the others do not hold a place it will
-- not use.
if mode == 'consume' and all_ok == 0 then
  local longest = 0
  for i = 1, n do
    if decisions[i].ok == 0 and decisions[i].wait > longest then longest = decisions[i].wait end
  end
  for i = 1, n do
    local d = decisions[i]
    if d.ok == 0 and d.wait == longest and d.algo == 'fixed_window' then fixed_window_record(d) end
  end
end

local out = {now, all_ok}
for i = 1, n do emit(out, decisions[i], committed) end
return out
