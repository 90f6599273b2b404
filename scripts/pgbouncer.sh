#!/usr/bin/env bash
# A local PgBouncer in front of a PostgreSQL of scripts/pg.sh, for the tests, the benchmarks and
# trying the fleet behind a pooler. pgbouncer refuses root, so as root it runs as `postgres`.
#
# usage: scripts/pgbouncer.sh start|stop|status|url [--port P] [--pg-port Q] [--pool-size N] [--mode MODE]
#   start      write its configuration and start it (already running: reload the configuration)
#   stop       stop it (SHUTDOWN on its admin console: client connections are closed)
#   status     say whether it runs
#   url        print the DATABASE_URL through it (database `wearbloom`)
#   --port       where it listens on 127.0.0.1 (default 15339)
#   --pg-port    the PostgreSQL on 127.0.0.1 it forwards to (default 15329, scripts/pg.sh's)
#   --pool-size  server connections per database and user (default_pool_size, default 8)
#   --mode       pool_mode: transaction (default) or session
# Every database name is forwarded (`* =`), so each test database gets a pool of its own. Its
# folder (configuration, log, pid) is .data/pgbouncer-<port>, or as root
# /var/lib/postgresql/wearbloom/pgbouncer-<port>, where `postgres` can reach it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
command=${1:-}
shift || true
port=15339
pg_port=15329
pool_size=8
mode=transaction
while [ $# -gt 0 ]; do
  case $1 in
    --port) port=$2; shift 2 ;;
    --pg-port) pg_port=$2; shift 2 ;;
    --pool-size) pool_size=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    *) echo "pgbouncer.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
case $mode in transaction|session) ;; *) echo "pgbouncer.sh: --mode is transaction or session" >&2; exit 2 ;; esac
binary=/usr/sbin/pgbouncer
url="postgresql://postgres@127.0.0.1:$port/wearbloom"

if [ "$(id -u)" -eq 0 ]; then
  dir="/var/lib/postgresql/wearbloom/pgbouncer-$port"
else
  dir="$root/.data/pgbouncer-$port"
fi

# From /, so that `postgres` never starts in a folder it cannot enter.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

pid() { [ -f "$dir/pgbouncer.pid" ] && cat "$dir/pgbouncer.pid"; }
running() { local p; p=$(pid) && [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

configure() {
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir" "$(dirname "$dir")"
  # trust on loopback, as the clusters of scripts/pg.sh; the user must still be listed.
  echo '"postgres" ""' | as_owner tee "$dir/userlist.txt" >/dev/null
  as_owner tee "$dir/pgbouncer.ini" >/dev/null <<EOF
[databases]
* = host=127.0.0.1 port=$pg_port

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
admin_users = postgres
pool_mode = $mode
default_pool_size = $pool_size
reserve_pool_size = 0
max_client_conn = 900
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
log_connections = 0
log_disconnections = 0
EOF
}

start() {
  [ -x "$binary" ] || { echo "pgbouncer.sh: $binary not found; run scripts/install-deps.sh" >&2; exit 1; }
  configure
  if running; then
    kill -HUP "$(pid)"
    return
  fi
  # Each client connection is a descriptor: max_client_conn stays under the usual 1024.
  as_owner "$binary" -d -q "$dir/pgbouncer.ini" || { tail -20 "$dir/pgbouncer.log" >&2; exit 1; }
  for _ in $(seq 100); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return; fi
    sleep 0.05
  done
  echo "pgbouncer.sh: not listening on $port after 5 s" >&2
  tail -20 "$dir/pgbouncer.log" >&2
  exit 1
}

# By its admin console's SHUTDOWN, not a signal: a pgbouncer started from a process that blocks
# SIGTERM and SIGINT (a Swift service handling them itself) inherits the blocked mask.
stop() {
  running || return 0
  local p
  p=$(pid)
  "$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)/psql" "postgresql://postgres@127.0.0.1:$port/pgbouncer" \
    -qc SHUTDOWN >/dev/null 2>&1 || true   # the console drops the connection as it shuts down
  for _ in $(seq 100); do
    kill -0 "$p" 2>/dev/null || return 0
    sleep 0.05
  done
  echo "pgbouncer.sh: pid $p did not shut down within 5 s; killing it" >&2
  kill -KILL "$p"
}

case $command in
  start) start; echo "$url" ;;
  stop) stop ;;
  status) if running; then echo "running: $url ($(grep -E '^(pool_mode|default_pool_size)' "$dir/pgbouncer.ini" | tr '\n' ' '))"; else echo "stopped"; exit 3; fi ;;
  url) echo "$url" ;;
  *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
