#!/usr/bin/env bash
# A throw-away PostgreSQL server on loopback for the tests: `scripts/pgtest.sh start DIR`
# creates a cluster in DIR (owned by the postgres user when run as root: initdb refuses root),
# starts it listening on 127.0.0.1 only, creates database "tokentool", and prints its URL.
# PostgreSQL cannot listen on port 0, so the port is one the OS just handed out as free; if another
# process takes it before the server binds, the start is retried on a new port (up to 5 times).
# `scripts/pgtest.sh stop DIR` stops it and removes DIR. `down DIR` stops the server and keeps its
# data (a database out of reach: connections refused); `up DIR` starts it again on the same port.
set -euo pipefail
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] || { echo "pgtest: PostgreSQL is not installed (scripts/bootstrap.sh installs it)" >&2; exit 2; }
as_postgres() {
    if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
case "${1:-}" in
start)
    dir=$2
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$dir"
    as_postgres "$bin/initdb" -D "$dir/data" -A trust -U tokentool >/dev/null
    started=""
    for attempt in 1 2 3 4 5; do
        port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        # The server must not inherit a descriptor of our caller: a pipe it reads to the end, or the
        # socket by which Foundation's Process learns that this script ended. They are closed in a
        # subshell, for pg_ctl alone: closed in this script, the socket told Foundation at once
        # that the script had ended, and its one manager thread then sat in waitpid until it did,
        # noticing no other child's exit meanwhile.
        if (
            for fd in $(ls "/proc/$BASHPID/fd"); do
                [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null || true
            done
            as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start
        ) </dev/null >/dev/null 2>"$dir/pg_ctl.err"; then
            started=yes
            break
        fi
        grep -q "could not bind\|Address already in use" "$dir/log" 2>/dev/null || break
        echo "pgtest: port $port was taken, retrying ($attempt)" >&2
    done
    [ -n "$started" ] || { echo "pgtest: PostgreSQL did not start:" >&2; cat "$dir/log" "$dir/pg_ctl.err" >&2 2>/dev/null; exit 1; }
    as_postgres "$bin/createdb" -h 127.0.0.1 -p "$port" -U tokentool tokentool
    echo "$port" > "$dir/port"
    echo "postgres://tokentool@127.0.0.1:$port/tokentool?sslmode=disable"
    ;;
stop)
    dir=$2
    as_postgres "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    rm -rf "$dir"
    ;;
down)
    dir=$2
    as_postgres "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    ;;
up)
    dir=$2
    port=$(cat "$dir/port")
    (
        for fd in $(ls "/proc/$BASHPID/fd"); do
            [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null || true
        done
        as_postgres "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -o "-c listen_addresses=127.0.0.1 -p $port -k $dir" start
    ) </dev/null >/dev/null 2>"$dir/pg_ctl.err" || { cat "$dir/pg_ctl.err" >&2; exit 1; }
    ;;
*)
    echo "usage: scripts/pgtest.sh start DIR | stop DIR | down DIR | up DIR" >&2
    exit 2
    ;;
esac
