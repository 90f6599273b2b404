#!/usr/bin/env bash
# The multi-host chaos run: a private PostgreSQL, worker "hosts" as network namespaces joined
# to this machine by veth pairs (10.231.N.0/24, no route anywhere else), worker processes on
# them and here, a mixed load of image, garment (cut-out), render and drill jobs with random
# SIGKILLs, then the checks (nothing lost, nothing settled twice, every image output read back
# and compared; each added worker process adds its slots) and drill throughput with 1, 2, 4
# workers (reported, not a pass mark: two cores saturate before the slots do).
#
# usage: scripts/chaos.sh [--short|--medium|--long] [--storage files|s3]   (root: it creates namespaces)
#   --short  CI's version: 2 namespaces, 100 image, 20 garment, 60 render, 1,000 drill jobs, 4 kills
#   --long   3 namespaces, 600 image, 120 garment, 400 render, 10,000 drill jobs, 20 kills (default: between)
#   --storage files  (default) images in one folder every process shares
#   --storage s3     images in a bucket of a throwaway Ceph gateway (scripts/s3.sh, .data/chaos-s3,
#            port FLEET_CHAOS_S3_PORT, default 17490); every image and render worker has an empty
#            tmpfs of its own for its files, so the gateway is the only way between them. No
#            scaling phase (drill jobs touch no image: the files run measures it).
set -euo pipefail
cd "$(dirname "$0")/.."
size=--medium
storage=files
while [ $# -gt 0 ]; do
  case $1 in
    --short|--medium|--long) size=$1; shift ;;
    --storage) storage=${2:-}; shift 2 || true ;;
    *) storage=usage; break ;;
  esac
done
case $size in
  --short) namespaces=2; args=(--images 100 --garments 20 --renders 60 --drills 1000 --kills 4); scaling_jobs=1000 ;;
  --medium) namespaces=2; args=(--images 300 --garments 60 --renders 200 --drills 3000 --kills 8); scaling_jobs=2000 ;;
  --long) namespaces=3; args=(--images 600 --garments 120 --renders 400 --drills 10000 --kills 20); scaling_jobs=4000 ;;
esac
case $storage in
  files) args+=(--scaling-jobs "$scaling_jobs") ;;
  s3) args+=(--scaling-jobs 0) ;;
  *) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
if [ "$(id -u)" -ne 0 ] || ! ip netns list >/dev/null 2>&1; then
  echo "chaos.sh: needs root and ip netns (creates network namespaces)" >&2
  exit 1
fi
dir=.data/chaos-postgres
port=${FLEET_CHAOS_PG_PORT:-$(scripts/pg.sh pick-port --dir "$dir" --port 15380)}
s3_dir=.data/chaos-s3
s3_port=${FLEET_CHAOS_S3_PORT:-17490}
prefix="fleetchaos$$"
cleanup() {
  # The gateway's daemons, by the pids s3.sh recorded when it started them (also on failure).
  if [ "$storage" = s3 ]; then scripts/s3.sh stop --dir "$s3_dir" --port "$s3_port" || true; fi
  for n in $(seq 1 "$namespaces"); do
    ip netns del "$prefix-$n" 2>/dev/null || true
    ip link del "fc$$-$n" 2>/dev/null || true
  done
  scripts/pg.sh stop --dir "$dir" --port "$port" || true
}
trap cleanup EXIT

# A run killed before its cleanup (SIGKILL skips the trap) leaves its namespaces and links
# behind: a second link holding the same subnet would take this run's replies. Remove those of
# runs that are gone (named after their pid), then use only subnets no interface here holds.
for ns in $(ip netns list | awk '{print $1}' | grep -E '^fleetchaos[0-9]+-[0-9]+$' || true); do
  owner=${ns#fleetchaos}; owner=${owner%%-*}
  if ! kill -0 "$owner" 2>/dev/null; then
    ip netns del "$ns" 2>/dev/null || true
    ip link del "fc$owner-${ns##*-}" 2>/dev/null || true
  fi
done
held=$(ip -o -4 addr show | awk '{print $4}')
subnets=()
for s in $(seq 1 250); do
  [ ${#subnets[@]} -eq "$namespaces" ] && break
  grep -qx "10.231.$s.1/24" <<<"$held" || subnets+=("$s")
done
if [ ${#subnets[@]} -ne "$namespaces" ]; then
  echo "chaos.sh: no free 10.231.N.0/24 subnets left on this machine" >&2
  exit 1
fi

url=$(scripts/pg.sh start --dir "$dir" --port "$port" --fast | tail -1)
hosts=(--host "local=127.0.0.1")
listen="127.0.0.1"
links=""
for n in $(seq 1 "$namespaces"); do
  ns="$prefix-$n"
  s=${subnets[$((n - 1))]}
  ip netns add "$ns"
  ip link add "fc$$-$n" type veth peer name eth0 netns "$ns"
  ip addr add "10.231.$s.1/24" dev "fc$$-$n"
  ip link set "fc$$-$n" up
  ip netns exec "$ns" ip addr add "10.231.$s.2/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  ip netns exec "$ns" ip link set lo up
  hosts+=(--host "$ns=10.231.$s.1")
  listen="$listen,10.231.$s.1"
  links="$links${links:+,}10.231.$s.1"
done
# PostgreSQL also listens on the host ends of the veth pairs, trusting only those subnets.
# pg.sh says where the cluster is: not under .data when `postgres` cannot enter the clone.
hba="$(scripts/pg.sh dir --dir "$dir" --port "$port")/pg_hba.conf"
grep -q "10.231.0.0/16" "$hba" || echo "host all all 10.231.0.0/16 trust" >>"$hba"
PGOPTIONS=--client-min-messages=warning psql "$url" -qc "ALTER SYSTEM SET listen_addresses = '$listen'"
scripts/pg.sh restart --dir "$dir" --port "$port"

if [ "$storage" = s3 ]; then
  # The gateway listens on loopback (this machine's processes) and on the host ends of this
  # run's links, the addresses the namespaces route to (not 0.0.0.0: nothing else reaches it).
  # A cluster a killed run left behind listens on that run's links: stopped, so start makes
  # a fresh one (memstore: nothing in it survives a stop anyway).
  scripts/s3.sh stop --dir "$s3_dir" --port "$s3_port"
  eval "$(scripts/s3.sh start --dir "$s3_dir" --port "$s3_port" --listen "$links" | grep '^export ')"
  # The workers' own variables (the AWS CLI's); fleet-bench points each host's at its link.
  export FLEET_STORAGE="s3://$S3_BUCKET/chaos" AWS_ENDPOINT_URL_S3=$S3_ENDPOINT AWS_REGION=$S3_REGION \
    AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY=$S3_SECRET_ACCESS_KEY
fi

bin=$(swift build --show-bin-path)
DATABASE_URL=$url "$bin/fleet-bench" chaos --port "$port" --storage "$storage" "${hosts[@]}" "${args[@]}"
