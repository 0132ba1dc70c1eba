# Sourced by the load scripts (load.sh, issuance_load.sh, revocation_load.sh) once they have made
# $work: from then on, exiting stops the server (if one was started) and removes $work.
# `start_serve TOOL` starts `TOOL serve --port 0` on embedded defaults in $work, waits until it says
# where it listens, and sets $server (its PID), $port (the port the OS picked) and $token (the dev
# provider's token from the curl line it prints).
server=""
trap '[ -n "$server" ] && { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; }; rm -rf "$work"' EXIT
start_serve() {
    (cd "$work" && exec "$1" serve --port 0 > "$work/serve.log" 2>&1) &
    server=$!
    for _ in $(seq 100); do grep -q "curl -s" "$work/serve.log" 2>/dev/null && break; sleep 0.1; done
    grep -q "curl -s" "$work/serve.log" || { cat "$work/serve.log"; exit 1; }
    port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$work/serve.log" | head -1 | grep -o '[0-9]*$')
    token=$(grep -o '"token":"[^"]*"' "$work/serve.log" | head -1 | cut -d'"' -f4)
}

# `wrk_script BODIES_LUA OUT_LUA` writes a wrk script that POSTs (JSON) the bodies of BODIES_LUA (a
# Lua file returning a list of strings) in turn, each thread from its own place in the list, and
# prints one line: "RESULT requests/s N p50_ms N p99_ms N requests N errors N". Each request is
# formatted once per thread, not once per request: wrk's Lua then costs what a fixed request does.
wrk_script() {
    cat > "$2" <<LUA
local bodies = dofile("$1")
local threads = 0
function setup(thread) thread:set("id", threads); threads = threads + 1 end
local i = 0
local requests = {}
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
function init(args)
  i = (id or 0) * 97
  for n, body in ipairs(bodies) do requests[n] = wrk.format(nil, nil, nil, body) end
end
function request() i = i % #requests + 1; return requests[i] end
done = function(summary, latency, requests)
  local errors = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("RESULT requests/s %.0f p50_ms %.2f p99_ms %.2f requests %d errors %d\n",
    summary.requests / (summary.duration / 1e6), latency:percentile(50) / 1000, latency:percentile(99) / 1000, summary.requests, errors))
end
LUA
}
