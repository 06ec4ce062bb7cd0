-- dispatch.lua: joined after the algorithm files and before consume.lua or
-- reserve.lua, so both map an algorithm's name to its functions in one
-- place. A script that leaves out an algorithm's file (reserve.lua's
-- variants) never names that algorithm, so the missing function is never
-- called.

-- decide runs the algorithm's decide; nil for an unknown algorithm. (A
-- pause first: reserve.lua decides a send's pauses here, four for a
-- WhatsApp send, and its GCRA limits itself.)
local function decide(algo, key, now, limit, period, burst, cost, extra)
  if algo == 'pause' then return pause_decide(key, now)
  elseif algo == 'gcra' then return gcra_decide(key, extra, now, limit, period, burst, cost)
  elseif algo == 'fixed_window' then return fixed_window_decide(key, now, limit, period, cost)
  elseif algo == 'sliding_window_log' then return sliding_window_log_decide(key, now, limit, period, cost)
  elseif algo == 'sliding_window_counter' then return sliding_window_counter_decide(key, now, limit, period, cost)
  elseif algo == 'min_interval' then return min_interval_decide(key, now, period)
  elseif algo == 'concurrency' then return concurrency_decide(key, now, limit, period, cost)
  elseif algo == 'distinct' then return distinct_decide(key, now, limit, period, extra)
  end
  return nil
end

-- commit writes a decision's consumption; call_id names sliding-log
-- entries and leases.
local function commit(d, call_id)
  local algo = d.algo
  if algo == 'pause' then return -- (a pause takes nothing)
  elseif algo == 'gcra' then gcra_commit(d)
  elseif algo == 'fixed_window' then fixed_window_commit(d)
  elseif algo == 'sliding_window_log' then sliding_window_log_commit(d, call_id)
  elseif algo == 'sliding_window_counter' then sliding_window_counter_commit(d)
  elseif algo == 'min_interval' then min_interval_commit(d)
  elseif algo == 'concurrency' then concurrency_commit(d, call_id)
  elseif algo == 'distinct' then distinct_commit(d)
  end
end

-- emit appends a decision's six reply values (ok, remaining, reset, retry,
-- wait, taken; see consume.lua): after the call when committed, else as
-- things stand.
local function emit(out, d, committed)
  local rem, taken, reset = d.rem_now, 0, d.reset
  if committed then rem, taken, reset = d.rem_after, d.taken, d.reset_after or d.reset end
  out[#out + 1] = d.ok
  out[#out + 1] = rem
  out[#out + 1] = reset
  out[#out + 1] = d.retry
  out[#out + 1] = ceil(d.wait)
  out[#out + 1] = taken
end
