-- wrk script for the soak (bench/soak.py): POSTs $BENCH_BODY, and $BENCH_STREAM_BODY every
-- $BENCH_STREAM_EVERY-th request; every streamed answer is checked to end its stream. A thread
-- stops after its share of $BENCH_LIMIT answers and prints BENCH_THREAD_DONE: wrk's main thread
-- sleeps for the whole -d, so bench/soak.py sends it SIGINT once every thread is done, and it
-- prints its summary then. Prints a one-line JSON summary, as post.lua does.
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  local headers = {["Content-Type"] = "application/json"}
  local authorization = os.getenv("BENCH_AUTHORIZATION")
  if authorization ~= nil and authorization ~= "" then
    headers["Authorization"] = authorization
  end
  plain = wrk.format("POST", nil, headers, os.getenv("BENCH_BODY"))
  streamed = wrk.format("POST", nil, headers, os.getenv("BENCH_STREAM_BODY"))
  every = tonumber(os.getenv("BENCH_STREAM_EVERY"))
  limit = math.ceil(tonumber(os.getenv("BENCH_LIMIT")) / tonumber(os.getenv("BENCH_THREADS")))
  sent, answered, streams, cut = 0, 0, 0, 0
end

function request()
  sent = sent + 1
  if sent % every == 0 then
    return streamed
  end
  return plain
end

function response(status, headers, body)
  answered = answered + 1
  if status == 200 and string.sub(body, 1, 5) == "data:" then
    streams = streams + 1
    if not string.find(body, "data: [DONE]", 1, true) then
      cut = cut + 1
    end
  end
  if answered == limit then
    io.write("BENCH_THREAD_DONE\n")
    io.stdout:flush()
    wrk.thread:stop()
  end
end

done = function(summary, latency, requests)
  local total_streams, total_cut = 0, 0
  for _, thread in ipairs(threads) do
    total_streams = total_streams + thread:get("streams")
    total_cut = total_cut + thread:get("cut")
  end
  local errors = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests":%d,"duration_us":%d,"p50_us":%d,"p99_us":%d,"max_us":%d,' ..
    '"status_errors":%d,"socket_errors":%d,"streams":%d,"cut_streams":%d}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency.max,
    errors.status, errors.connect + errors.read + errors.write + errors.timeout,
    total_streams, total_cut))
end
