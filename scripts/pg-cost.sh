#!/usr/bin/env bash
# What a command costs the PostgreSQL cluster it runs against: the server's CPU (the postmaster
# and every backend, those that ended during the command included), the WAL it wrote
# (pg_stat_wal), its connections at the end, and the statements that took the most execution
# time (pg_stat_statements, when the cluster preloads it). For docs/scaling.md's figures per
# job and per render.
#
# usage: scripts/pg-cost.sh --dir DIR --port PORT -- COMMAND [ARGS...]
#   the cluster is scripts/pg.sh's (--dir, --port); prints key=value lines after the command's output
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=
port=
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --) shift; break ;;
    *) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
[ -n "$dir" ] && [ -n "$port" ] && [ $# -gt 0 ] || { sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
dir=$("$root"/scripts/pg.sh dir --dir "$dir")
url="postgresql://postgres@127.0.0.1:$port/postgres"
postmaster=$(head -1 "$dir/postmaster.pid")
ticks=$(getconf CLK_TCK)

# CPU ticks of the postmaster (with the backends it has reaped) and of its living children.
cpu_ticks() {
  local total=0 pid fields
  for pid in "$postmaster" $(pgrep -P "$postmaster"); do
    fields=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null) || continue
    # After the command name: state is field 1, utime 12, stime 13, cutime 14, cstime 15.
    total=$((total + $(echo "$fields" | awk '{print $12 + $13 + $14 + $15}')))
  done
  echo "$total"
}
sql() { PGOPTIONS=--client-min-messages=warning psql "$url" -qAt -c "$1"; }

statements=0
if [ "$(sql "SELECT count(*) FROM pg_extension WHERE extname = 'pg_stat_statements'")" = 1 ]; then
  statements=1
  sql "SELECT pg_stat_statements_reset()" >/dev/null
fi
wal_before=$(sql "SELECT wal_bytes || ' ' || wal_records FROM pg_stat_wal")
cpu_before=$(cpu_ticks)
started=$(date +%s.%N)
"$@"
ended=$(date +%s.%N)
cpu_after=$(cpu_ticks)
wal_after=$(sql "SELECT wal_bytes || ' ' || wal_records FROM pg_stat_wal")
read -r bytes_before records_before <<<"$wal_before"
read -r bytes_after records_after <<<"$wal_after"
echo "pg_cost.seconds=$(echo "$ended - $started" | bc)"
echo "pg_cost.server_cpu_seconds=$(echo "scale=2; ($cpu_after - $cpu_before) / $ticks" | bc)"
echo "pg_cost.wal_bytes=$(echo "$bytes_after - $bytes_before" | bc)"
echo "pg_cost.wal_records=$((records_after - records_before))"
echo "pg_cost.connections_at_end=$(sql "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend'")"
if [ "$statements" -eq 1 ]; then
  sql "SELECT 'pg_cost.statement ' || round(total_exec_time)::text || ' ms ' || calls || ' calls: ' || left(regexp_replace(query, '\s+', ' ', 'g'), 90)
       FROM pg_stat_statements ORDER BY total_exec_time DESC LIMIT 8"
fi
