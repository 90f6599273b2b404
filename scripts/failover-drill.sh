#!/usr/bin/env bash
# The failover drill: a primary and a streaming standby on loopback (scripts/pg.sh start, then
# standby: pg_basebackup -R), the dispatcher and workers on one DATABASE_URL naming both hosts
# with target_session_attrs=read-write, a mixed load from clients over the dispatcher's socket
# (single and batched enqueues, renders with credits, waits); then the primary is stopped with
# pg_ctl -m immediate (its WAL sender stopped for a second before, so that the standby is behind
# as over a real link) and the standby promoted while the fleet runs on. It prints what clients
# were told that did not survive, what was done twice, how soon the fleet claimed and enqueued
# again after the promotion, and whether the pending waits were answered (fleet-bench failover).
#
# usage: scripts/failover-drill.sh [--short] [--async] [--stall SECONDS] [--json] [--keep]
#   --short   the test's version: 6 s of load before the stop and after the promotion (default 20 s)
#   --async   asynchronous replication (no synchronous_standby_names): what is lost is measured
#   --stall   seconds the primary's WAL sender is stopped before the primary is (default 1; 0: none)
#   --json    also print one JSON object per figure
#   --keep    leave both clusters running (the promoted standby is the primary)
# Clusters live under .data/failover-primary and .data/failover-standby (FLEET_FAILOVER_DIR
# replaces .data/failover); ports from FLEET_FAILOVER_PG_PORT (default: the first free from
# 15400), the standby on the next free one. Binaries from FLEET_BIN, else `swift build`'s.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=20
sync=(--sync)
replication=sync
extra=()
keep=0
while [ $# -gt 0 ]; do
  case $1 in
    --short) seconds=6; shift ;;
    --async) sync=(); replication=async; shift ;;
    --stall) extra+=(--standby-stall-seconds "$2"); shift 2 ;;
    --json) extra+=(--json); shift ;;
    --keep) keep=1; shift ;;
    *) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
base=${FLEET_FAILOVER_DIR:-.data/failover}
primary_dir=$base-primary
standby_dir=$base-standby

if [ -z "${FLEET_BIN:-}" ]; then
  swift build >&2
  FLEET_BIN=$(swift build --show-bin-path)
fi

# A fresh pair each time: a promoted standby is no standby any more.
for dir in "$primary_dir" "$standby_dir"; do
  scripts/pg.sh stop --mode immediate --dir "$dir" >/dev/null 2>&1 || true
  rm -rf "$(scripts/pg.sh dir --dir "$dir")"
done
primary_port=$(scripts/pg.sh pick-port --dir "$primary_dir" --port "${FLEET_FAILOVER_PG_PORT:-15400}")
cleanup() {
  if [ "$keep" -eq 0 ]; then
    scripts/pg.sh stop --mode immediate --dir "$primary_dir" --port "$primary_port" >/dev/null 2>&1 || true
    scripts/pg.sh stop --dir "$standby_dir" --port "${standby_port:-0}" >/dev/null 2>&1 || true
  fi
}
trap cleanup EXIT
scripts/pg.sh start --dir "$primary_dir" --port "$primary_port" >/dev/null
standby_port=$(scripts/pg.sh pick-port --dir "$standby_dir" --port $((primary_port + 1)))
scripts/pg.sh standby --dir "$standby_dir" --port "$standby_port" --primary-port "$primary_port" "${sync[@]}" >/dev/null
echo "failover drill: primary on $primary_port, $replication standby on $standby_port" >&2

"$FLEET_BIN/fleet-bench" failover --replication "$replication" \
  --primary-dir "$primary_dir" --primary-port "$primary_port" --standby-dir "$standby_dir" --standby-port "$standby_port" \
  --load-seconds "$seconds" --after-seconds "$seconds" "${extra[@]}"
