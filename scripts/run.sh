#!/usr/bin/env bash
# Starts the fleet on the embedded default: installs the Debian packages if missing,
# starts a local PostgreSQL under .data/postgres (unless DATABASE_URL is set), builds,
# runs the dispatcher and the workers, sends a body photo and a garment photo through
# normalise -> background removal -> render (offline providers), then a batch of drill jobs
# through the queue, and prints what happened. With --serve the fleet keeps running until
# Ctrl-C, for a backend to drive (docs/backend.md), and the demo and the drill jobs run only with
# --demo: a restart must not send them again. Other photos: scripts/run.sh [--body PATH] [--garment PATH].
set -euo pipefail
cd "$(dirname "$0")/.."
serve=0
demo=1
demo_args=()
usage="usage: scripts/run.sh [--serve [--demo]] [--body PATH] [--garment PATH]"
while [ $# -gt 0 ]; do
  case "$1" in
    --serve) serve=1 ;;
    --demo) demo=2 ;;
    --body|--garment) demo_args+=("$1" "$(realpath "$2")"); shift ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
  shift
done
# One-shot runs show the demo; --serve only with --demo.
[ "$serve" -eq 1 ] && [ "$demo" -eq 1 ] && demo=0
scripts/install-deps.sh
if [ -z "${DATABASE_URL:-}" ]; then
  DATABASE_URL=$(scripts/pg.sh start)
  embedded_pg=1
  export DATABASE_URL
  echo "embedded PostgreSQL: $DATABASE_URL (stop it with scripts/pg.sh stop)"
fi
export FLEET_STORAGE_ROOT=${FLEET_STORAGE_ROOT:-$PWD/.data/images}
# The dispatcher's TCP listener needs a shared token: one is made once and kept (mode 0600).
if [ -z "${FLEET_DISPATCHER_TOKEN:-}" ]; then
  mkdir -p .data
  [ -s .data/dispatcher.token ] || (umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >.data/dispatcher.token)
  FLEET_DISPATCHER_TOKEN=$(cat .data/dispatcher.token)
  export FLEET_DISPATCHER_TOKEN
fi
export FLEET_LOG_FORMAT=${FLEET_LOG_FORMAT:-json}
logs=.data/logs
mkdir -p "$logs" "$FLEET_STORAGE_ROOT"
echo "building (release; log in $logs/build.log)..."
swift build -c release >"$logs/build.log" 2>&1 || { tail -40 "$logs/build.log"; exit 1; }
bin=$(swift build -c release --show-bin-path)
"$bin/dispatcher" migrate 2>>"$logs/dispatcher.log"

pids=()
names=()
# Stops every process started here (SIGTERM: each drains) and says how each ended.
stop_fleet() {
  trap - EXIT INT TERM
  [ ${#pids[@]} -gt 0 ] || return 0
  echo "stopping the fleet (SIGTERM: running jobs finish or go back to the queue)..."
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for index in "${!pids[@]}"; do
    status=0
    wait "${pids[$index]}" 2>/dev/null || status=$?
    echo "stopped ${names[$index]} (pid ${pids[$index]}, exit $status)"
  done
  [ -n "${embedded_pg:-}" ] && echo "the embedded PostgreSQL keeps running (scripts/pg.sh stop stops it)"
  return 0
}
trap stop_fleet EXIT
trap 'echo; stop_fleet; exit 130' INT
trap 'stop_fleet; exit 143' TERM
# HTTP (/healthz, /readyz, /metrics): the dispatcher on FLEET_HTTP_ADDRESS (default 127.0.0.1:9090);
# the workers without, so an exported address is not taken four times.
for executable in dispatcher render-worker image-worker fleet-drill; do
  if [ "$executable" = dispatcher ]; then http=${FLEET_HTTP_ADDRESS:-127.0.0.1:9090}; else http=off; fi
  FLEET_HTTP_ADDRESS=$http "$bin/$executable" 2>>"$logs/$executable.log" &
  pids+=($!)
  names+=("$executable")
  echo "started $executable (pid $!), log: $logs/$executable.log"
done

# The dispatcher opens its socket once started (migrations checked): wait for it to answer.
"$bin/dispatcher" ping --wait 60 >/dev/null || { echo "the dispatcher did not answer within 60 s; its log:"; tail -20 "$logs/dispatcher.log"; exit 1; }
if [ "$demo" -gt 0 ]; then
  echo "the demo: a body photo and a garment photo uploaded, the render requested at once (normalise, background removal, then render, as the fleet runs them)..."
  "$bin/fleet-demo" "${demo_args[@]}"
  echo "sending 2,000 drill jobs through the queue..."
  "$bin/fleet-bench" smoke --jobs 2000
fi
echo "the queue, as the dispatcher's socket reports it (dispatcher stats):"
"$bin/dispatcher" stats
if [ "$serve" -eq 1 ]; then
  echo "fleet running; for a backend (docs/backend.md):"
  echo "  Unix socket ${FLEET_DISPATCHER_SOCKET:-$PWD/.data/dispatcher.sock} (no token)"
  echo "  TCP ${FLEET_DISPATCHER_TCP:-127.0.0.1:7420}, token in $PWD/.data/dispatcher.token (or FLEET_DISPATCHER_TOKEN)"
  echo "  uploads go to $FLEET_STORAGE_ROOT/{userId or tokenId}/uploads/{uploadId}"
  echo "Ctrl-C stops it"
  wait
fi
