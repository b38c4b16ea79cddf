-- wrk script: POST the body in $BENCH_BODY with the headers the bench sets, and print a one-line
-- JSON summary at the end so bench/run.py need not parse wrk's human-readable output.
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY")
wrk.headers["Content-Type"] = "application/json"
local authorization = os.getenv("BENCH_AUTHORIZATION")
if authorization ~= nil and authorization ~= "" then
  wrk.headers["Authorization"] = authorization
end

done = function(summary, latency, requests)
  local errors = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"bytes":%d,"p50_us":%d,"p90_us":%d,"p99_us":%d,' ..
    '"max_us":%d,"status_errors":%d,"connect_errors":%d,"read_errors":%d,"write_errors":%d,' ..
    '"timeouts":%d}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max,
    errors.status, errors.connect, errors.read, errors.write, errors.timeout))
end
