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
