#!/usr/bin/env bash
# Two fleet-bench binaries in alternating pairs (old new, new old, ...) against one PostgreSQL
# cluster, each run's JSON lines tagged with its build and pair, then the medians per metric
# and their ratio. Besides what the suite prints, every run records what it cost in CPU: the
# bench process with its worker processes (`cpu.bench_seconds`) and the cluster
# (`cpu.server_seconds`, from scripts/pg-cost.sh). On a shared machine the rates move with
# whatever else runs; the CPU a run takes moves much less, so a regression in cost shows there
# even when the rates are noise.
#
# usage: scripts/ab-bench.sh --old BIN --new BIN --dir DIR --port PORT [--pairs N] [--out FILE] -- SUITE [ARGS...]
#   DIR and PORT: a cluster of scripts/pg.sh (started); N defaults to 5; FILE keeps the JSON lines.
#   Run each binary where it was built: suites start the fleet's other executables from its folder.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
old= new= dir= port= pairs=5 out=
while [ $# -gt 0 ]; do
  case $1 in
    --old) old=$2; shift 2 ;;
    --new) new=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --) shift; break ;;
    *) usage ;;
  esac
done
[ -n "$old" ] && [ -n "$new" ] && [ -n "$dir" ] && [ -n "$port" ] && [ $# -gt 0 ] || usage
[ -x "$old" ] && [ -x "$new" ] || { echo "ab-bench: both binaries must be executable" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp /tmp/ab-bench.XXXXXX.jsonl)
: > "$out"
url="postgresql://postgres@127.0.0.1:$port/postgres"

run() { # build binary pair suite-args...
  local build=$1 binary=$2 pair=$3; shift 3
  local log; log=$(mktemp)
  DATABASE_URL=$url "$root/scripts/pg-cost.sh" --dir "$dir" --port "$port" -- \
    /usr/bin/time -f 'cpu.bench_seconds=%U %S' -o "$log.time" "$binary" "$@" --json --repeats 1 > "$log" 2> "$log.err" || {
    echo "ab-bench: the $build build's run of pair $pair failed:" >&2
    tail -5 "$log.err" >&2
    exit 1
  }
  local tag="\"build\":\"$build\",\"pair\":$pair"
  grep '^{' "$log" | sed "s/^{/{$tag,/" >> "$out"
  awk -v tag="$tag" -F'[= ]' '/^cpu.bench_seconds=/ { printf "{%s,\"metric\":\"cpu.bench_seconds\",\"value\":%s,\"unit\":\"s\"}\n", tag, $2 + $3 }' "$log.time" >> "$out"
  awk -v tag="$tag" -F= '/^pg_cost.server_cpu_seconds=/ { printf "{%s,\"metric\":\"cpu.server_seconds\",\"value\":%s,\"unit\":\"s\"}\n", tag, $2 + 0 }' "$log" >> "$out"
  rm -f "$log" "$log.time" "$log.err"
}

for pair in $(seq "$pairs"); do
  if (( pair % 2 )); then order="old new"; else order="new old"; fi
  for build in $order; do
    binary=$old; [ "$build" = new ] && binary=$new
    echo "pair $pair: $build" >&2
    run "$build" "$binary" "$pair" "$@"
  done
done

echo "runs: $out" >&2
python3 - "$out" <<'PY'
import collections, json, statistics, sys
values = collections.defaultdict(lambda: collections.defaultdict(list))
units = {}
for line in open(sys.argv[1]):
    row = json.loads(line)
    if isinstance(row.get("value"), (int, float)):
        values[row["metric"]][row["build"]].append(row["value"])
        units[row["metric"]] = row.get("unit", "")
print(f"{'metric':44} {'old median':>12} {'new median':>12} {'new/old':>8}  runs")
for metric, builds in values.items():
    old, new = builds.get("old", []), builds.get("new", [])
    if not old or not new:
        continue
    o, n = statistics.median(old), statistics.median(new)
    ratio = f"{n / o:.3f}" if o else "-"
    print(f"{metric:44} {o:12.2f} {n:12.2f} {ratio:>8}  {len(old)}+{len(new)} {units[metric]}")
PY
