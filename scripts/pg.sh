#!/usr/bin/env bash
# A local PostgreSQL cluster in a folder of the project (default .data/postgres), for the
# embedded default, the tests and the benchmarks. initdb refuses root, so as root the
# server runs as the `postgres` user.
#
# usage: scripts/pg.sh start|stop|restart|status|url|dir|pick-port|standby|promote [--dir DIR] [--port PORT] [--fast] [--mode MODE]
#   start      create the cluster if needed, start it, create database `wearbloom`
#   standby    a streaming standby of the running cluster on --primary-port, copied with
#              `pg_basebackup -R` into --dir (replaced) and started on --port; its
#              application_name is `standby_<port>`. --sync also makes it the primary's
#              synchronous standby (synchronous_standby_names, synchronous_commit = on):
#              a commit is acknowledged only once the standby has it
#   promote    turn the standby in --dir into a primary (pg_ctl promote, waits)
#   stop       stop it (fast shutdown)
#   restart    stop and start again (used by the restart tests); --mode fast|immediate
#              (stop takes --mode too)
#              is pg_ctl's shutdown mode (immediate: no checkpoint, as after a crash)
#   url        print the DATABASE_URL of the cluster
#   pick-port  print the port the running cluster uses, else the first free one from --port
#   dir        print the cluster's folder: --dir, or as root /var/lib/postgresql/wearbloom/<hash>/<name>
#              when `postgres` cannot enter --dir's parent (a clone in root's 0700 home)
#   --fast     fsync off: for throwaway test clusters only, never for benchmarks
# Default ports sit below Linux's ephemeral range (32768-60999), where a client socket of a
# busy test run could hold the port PostgreSQL wants to listen on.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
command=${1:-}
shift || true
dir="$root/.data/postgres"
port=15329
fast=0
mode=fast
primary_port=
sync=0
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --fast) fast=1; shift ;;
    --mode) mode=$2; shift 2 ;;
    --primary-port) primary_port=$2; shift 2 ;;
    --sync) sync=1; shift ;;
    *) echo "pg.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
dir=$(realpath -m "$dir")
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$bin" ] || { echo "pg.sh: PostgreSQL server binaries not found; run scripts/install-deps.sh" >&2; exit 1; }
url="postgresql://postgres@127.0.0.1:$port/wearbloom"

# From /, so that `postgres` never starts in a folder it cannot enter.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then (cd / && runuser -u postgres -- "$@"); else "$@"; fi
}

# As root the server runs as `postgres`, which must reach the cluster's folder. A clone in a
# folder `postgres` cannot enter (root's home, mode 0700) keeps its clusters under
# /var/lib/postgresql/wearbloom/<hash of the asked path>/ instead: the same path always maps to
# the same place, so start, stop, status, url and restart find it again (and keep using it if
# the clone's folder is opened later, as long as a cluster is there).
if [ "$(id -u)" -eq 0 ]; then
  moved="/var/lib/postgresql/wearbloom/$(printf '%s' "$dir" | sha1sum | cut -c1-16)/$(basename "$dir")"
  if [ -f "$moved/PG_VERSION" ]; then
    dir=$moved
  elif ! as_owner test -x "$(dirname "$dir")"; then
    mkdir -p "$(dirname "$dir")"
    if ! as_owner test -x "$(dirname "$dir")"; then
      [ "$command" = start ] && echo "pg.sh: postgres cannot enter $(dirname "$dir"); the cluster lives in $moved" >&2
      dir=$moved
      mkdir -p "$(dirname "$dir")"
      chown postgres: "$(dirname "$dir")" "$(dirname "$(dirname "$dir")")"
    fi
  fi
fi

running() { as_owner "$bin/pg_ctl" -D "$dir" status >/dev/null 2>&1; }

start() {
  if [ ! -f "$dir/PG_VERSION" ]; then
    mkdir -p "$dir"
    [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
    chmod 700 "$dir"
    as_owner "$bin/initdb" -D "$dir" -U postgres --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir.initdb.log" 2>&1 \
      || { cat "$dir.initdb.log" >&2; exit 1; }
    {
      echo "listen_addresses = '127.0.0.1'"
      echo "port = $port"
      echo "unix_socket_directories = '$dir'"
      # The test suite runs its suites at once, each with its pools, worker processes and
      # dispatchers: it peaks near 300 connections, more on a loaded machine.
      echo "max_connections = 1000"
      echo "shared_buffers = 256MB"
      echo "log_min_messages = warning"
      # The jobs table's updates are never HOT: vacuum it four times a minute so its heap stays
      # at live rows plus seconds of dead ones (docs/operations.md, the soak in docs/benchmarks.md).
      echo "autovacuum_naptime = 15s"
      if [ "$fast" -eq 1 ]; then
        echo "fsync = off"
        echo "synchronous_commit = off"
        echo "full_page_writes = off"
      fi
    } | as_owner tee -a "$dir/postgresql.conf" >/dev/null
  fi
  if ! running; then
    as_owner "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -o "-p $port" -w -t 60 start >/dev/null \
      || { tail -20 "$dir/server.log" >&2; exit 1; }
  fi
  as_owner "$bin/psql" -h "$dir" -p "$port" -U postgres -d postgres -tAq \
    -c "SELECT 1 FROM pg_database WHERE datname = 'wearbloom'" | grep -q 1 \
    || as_owner "$bin/createdb" -h "$dir" -p "$port" -U postgres wearbloom
}

# A copy of the primary on $primary_port, streaming from it. The copy brings the primary's
# postgresql.conf: the lines appended here (the last value wins) give it its own port and
# socket folder. synchronous_standby_names is set on the primary only after the copy, so a
# promoted standby does not wait for a standby of its own.
standby() {
  [ -n "$primary_port" ] || { echo "pg.sh: standby needs --primary-port" >&2; exit 2; }
  local primary="postgresql://postgres@127.0.0.1:$primary_port/postgres" name="standby_$port"
  if running; then as_owner "$bin/pg_ctl" -D "$dir" -m immediate -w stop >/dev/null; fi
  rm -rf "$dir"
  mkdir -p "$dir"
  [ "$(id -u)" -eq 0 ] && chown postgres: "$dir"
  chmod 700 "$dir"
  as_owner "$bin/pg_basebackup" -d "$primary" -D "$dir" -R -X stream --checkpoint=fast >"$dir.basebackup.log" 2>&1 \
    || { cat "$dir.basebackup.log" >&2; exit 1; }
  {
    echo "port = $port"
    echo "unix_socket_directories = '$dir'"
    echo "cluster_name = '$name'"
    echo "hot_standby_feedback = on"
  } | as_owner tee -a "$dir/postgresql.conf" >/dev/null
  as_owner "$bin/pg_ctl" -D "$dir" -l "$dir/server.log" -o "-p $port" -w -t 60 start >/dev/null \
    || { tail -20 "$dir/server.log" >&2; exit 1; }
  if [ "$sync" -eq 1 ]; then
    as_owner "$bin/psql" "$primary" -qAt -c "ALTER SYSTEM SET synchronous_standby_names = '$name'" \
      -c "ALTER SYSTEM SET synchronous_commit = 'on'" -c "SELECT pg_reload_conf()" >/dev/null
  else
    as_owner "$bin/psql" "$primary" -qAt -c "ALTER SYSTEM RESET synchronous_standby_names" -c "SELECT pg_reload_conf()" >/dev/null
  fi
  # Streaming before the first commit that must wait for it.
  for _ in $(seq 1 100); do
    if as_owner "$bin/psql" "$primary" -qAt -c "SELECT 1 FROM pg_stat_replication WHERE application_name = '$name' AND state = 'streaming'" | grep -q 1; then
      return
    fi
    sleep 0.1
  done
  echo "pg.sh: the standby on port $port is not streaming after 10 s" >&2
  exit 1
}

# The first port from $port that no socket of this host uses.
pick_port() {
  if running; then sed -n 4p "$dir/postmaster.pid"; return; fi
  local candidate
  for candidate in $(seq "$port" $((port + 200))); do
    if [ -z "$(ss -Htan "( sport = :$candidate )" 2>/dev/null)" ]; then echo "$candidate"; return; fi
  done
  echo "pg.sh: no free port in $port-$((port + 200))" >&2
  exit 1
}

case $command in
  pick-port) pick_port ;;
  start) start; echo "$url" ;;
  standby) standby; echo "$url" ;;
  promote) as_owner "$bin/pg_ctl" -D "$dir" -w -t 60 promote >/dev/null ;;
  stop) if running; then as_owner "$bin/pg_ctl" -D "$dir" -m "$mode" -w stop >/dev/null; fi ;;
  restart) as_owner "$bin/pg_ctl" -D "$dir" -m "$mode" -w -t 60 -o "-p $port" restart -l "$dir/server.log" >/dev/null ;;
  status) if running; then echo "running: $url"; else echo "stopped"; exit 3; fi ;;
  url) echo "$url" ;;
  dir) echo "$dir" ;;
  *) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
