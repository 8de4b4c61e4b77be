-- wrk script for benches/load/run.sh: one API key per wrk thread; counts the answers per key
-- and reports the admitted rate per key against the configured one.
-- Arguments (after --): requests per second per key, global requests per second.

local threads = {}

function setup(thread)
  table.insert(threads, thread)
  thread:set("id", #threads)
end

function init(args)
  per_key = tonumber(args[1]) or 0
  global = tonumber(args[2]) or 0
  ok, refused, other = 0, 0, 0
  wrk.headers["x-api-key"] = "key-" .. id
end

function response(status, headers, body)
  if status == 200 then
    ok = ok + 1
  elseif status == 429 then
    refused = refused + 1
  else
    other = other + 1
  end
end

function done(summary, latency, requests)
  local secs = summary.duration / 1e6
  local per_key = threads[1]:get("per_key")
  local global = threads[1]:get("global")
  local keys = #threads
  -- Whichever limit binds: the global ceiling, or the keys' own limits.
  local global_binds = global < per_key * keys
  local total = 0
  io.write(string.format("\n%-7s %10s %10s %7s %12s %18s %12s %8s\n",
    "key", "admitted", "refused", "other", "admitted/s", "after burst (/s)", "configured", "error"))
  for _, t in ipairs(threads) do
    local ok = t:get("ok")
    local steady = (ok - per_key) / secs
    total = total + ok
    local err = global_binds and "     n/a"
      or string.format("%+7.2f%%", (steady - per_key) / per_key * 100)
    io.write(string.format("key-%-3d %10d %10d %7d %12.1f %18.1f %12d %s\n",
      t:get("id"), ok, t:get("refused"), t:get("other"), ok / secs, steady, per_key, err))
  end
  -- The burst is one second's worth of the binding limit.
  local expected = global_binds and global or per_key * keys
  local steady = (total - expected) / secs
  io.write(string.format("all     %10d %10s %7s %12.1f %18.1f %12d %+7.2f%%%s\n",
    total, "", "", total / secs, steady, expected, (steady - expected) / expected * 100,
    global_binds and "  (global ceiling)" or ""))
  io.write(string.format("%.1f s, %d requests (%.0f/s), %d socket errors, latency p50 %.2f ms p99 %.2f ms\n",
    secs, summary.requests, summary.requests / secs,
    summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
