#!/usr/bin/env bash
# The multi-host chaos run: a private PostgreSQL, worker "hosts" as network namespaces joined
# to this machine by veth pairs (10.231.N.0/24, no route anywhere else), worker processes on
# them and here, a mixed load of image, render and drill jobs with random SIGKILLs, then the
# checks (nothing lost, nothing settled twice; each added worker process adds its slots) and drill
# throughput with 1, 2, 4 workers (reported, not a pass mark: two cores saturate before the slots do).
#
# usage: scripts/chaos.sh [--short|--long]   (root: it creates namespaces)
#   --short  CI's version: 2 namespaces, 100 image, 60 render, 1,000 drill jobs, 4 kills
#   --long   3 namespaces, 600 image, 400 render, 10,000 drill jobs, 20 kills (default: between)
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:---medium}
case $size in
  --short) namespaces=2; args=(--images 100 --renders 60 --drills 1000 --kills 4 --scaling-jobs 1000) ;;
  --medium) namespaces=2; args=(--images 300 --renders 200 --drills 3000 --kills 8 --scaling-jobs 2000) ;;
  --long) namespaces=3; args=(--images 600 --renders 400 --drills 10000 --kills 20 --scaling-jobs 4000) ;;
  *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "chaos.sh: needs root and ip netns (creates network namespaces)" >&2
  exit 1
fi
dir=.data/chaos-postgres
port=${FLEET_CHAOS_PG_PORT:-$(scripts/pg.sh pick-port --dir "$dir" --port 15380)}
prefix="fleetchaos$$"
cleanup() {
  for n in $(seq 1 "$namespaces"); do
    ip netns del "$prefix-$n" 2>/dev/null || true
    ip link del "fc$$-$n" 2>/dev/null || true
  done
  scripts/pg.sh stop --dir "$dir" --port "$port" || true
}
trap cleanup EXIT

url=$(scripts/pg.sh start --dir "$dir" --port "$port" --fast | tail -1)
hosts=(--host "local=127.0.0.1")
listen="127.0.0.1"
for n in $(seq 1 "$namespaces"); do
  ns="$prefix-$n"
  ip netns add "$ns"
  ip link add "fc$$-$n" type veth peer name eth0 netns "$ns"
  ip addr add "10.231.$n.1/24" dev "fc$$-$n"
  ip link set "fc$$-$n" up
  ip netns exec "$ns" ip addr add "10.231.$n.2/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" ip link set lo up
  hosts+=(--host "$ns=10.231.$n.1")
  listen="$listen,10.231.$n.1"
done
# PostgreSQL also listens on the host ends of the veth pairs, trusting only those subnets.
# pg.sh says where the cluster is: not under .data when `postgres` cannot enter the clone.
hba="$(scripts/pg.sh dir --dir "$dir" --port "$port")/pg_hba.conf"
grep -q "10.231.0.0/16" "$hba" || echo "host all all 10.231.0.0/16 trust" >>"$hba"
PGOPTIONS=--client-min-messages=warning psql "$url" -qc "ALTER SYSTEM SET listen_addresses = '$listen'"
scripts/pg.sh restart --dir "$dir" --port "$port"

bin=$(swift build --show-bin-path)
DATABASE_URL=$url "$bin/fleet-bench" chaos --port "$port" "${hosts[@]}" "${args[@]}"
