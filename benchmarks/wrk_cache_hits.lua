-- The hit-path load of benchmarks/k6_cache_hits.js (MODE=hits) for wrk, a client that costs
-- far less CPU per request than k6: POST /v1/chat/completions, "Write a short story about
-- the number ${n}.", max_tokens 128, n drawn from PROMPTS (env, default 50) distinct values.
-- done() prints one JSON line (prefixed "WRK_JSON ") with req/s, errors and latency in ms.
local prompts = tonumber(os.getenv("PROMPTS") or "50")
local bodies = {}
for n = 0, prompts - 1 do
  bodies[n] = string.format(
    '{"model":"stub-model","messages":[{"role":"user","content":"Write a short story about the number %d."}],"max_tokens":128}', n)
end

wrk.method = "POST"
wrk.path = "/v1/chat/completions"
wrk.headers["Content-Type"] = "application/json"

function init(args)
  math.randomseed(os.time() + tonumber(tostring({}):sub(8), 16))
end

function request()
  return wrk.format(nil, nil, nil, bodies[math.random(0, prompts - 1)])
end

function done(summary, latency, requests)
  local errors = summary.errors.connect + summary.errors.read + summary.errors.write
                 + summary.errors.status + summary.errors.timeout
  io.write(string.format(
    'WRK_JSON {"requests":%d,"duration_s":%.6f,"req_per_s":%.3f,"errors":%d,' ..
    '"latency_p50_ms":%.4f,"latency_p95_ms":%.4f,"latency_p99_ms":%.4f}\n',
    summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6), errors,
    latency:percentile(50) / 1000, latency:percentile(95) / 1000, latency:percentile(99) / 1000))
end
