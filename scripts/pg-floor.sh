#!/usr/bin/env bash
# The least a PostgreSQL cluster's CPU can be for the shape of a render's transactions: pgbench
# runs the render's six transactions, statement for statement and round trip for round trip
# (docs/scaling.md, "A render's transactions"), on three bare tables (a primary key each, no
# other index, no trigger, no jsonb), and scripts/pg-cost.sh reads the server's CPU around it.
# Beside it, the same for the two smallest units: a round trip (`SELECT 1`) and a write
# transaction (`BEGIN`, one insert, `COMMIT`: one WAL flush). What the fleet's own statements
# cost beyond this floor is their content: rows, index entries, triggers, plans.
#
# usage: scripts/pg-floor.sh --dir DIR --port PORT [--clients N] [--seconds S] [--repeats R]
#   DIR and PORT: a started scripts/pg.sh cluster (fsync on, as the fleet runs: not --fast).
#   N defaults to 16 (the render worker's pool), S to 10, R to 3; prints one JSON line a run:
#   {"shape": …, "units": …, "server_cpu_us_per_unit": …, "wal_bytes_per_unit": …}
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir= port= clients=16 seconds=10 repeats=3
usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ -n "$dir" ] && [ -n "$port" ] || usage
pgbench=$(ls /usr/lib/postgresql/*/bin/pgbench 2>/dev/null | sort -V | tail -1)
[ -x "$pgbench" ] || { echo "pg-floor: pgbench not found (Debian's postgresql package)" >&2; exit 1; }
url="postgresql://postgres@127.0.0.1:$port/postgres"
sql() { PGOPTIONS=--client-min-messages=warning psql "$url" -qAt -v ON_ERROR_STOP=1 -c "$1"; }
sql "CREATE DATABASE floor" 2>/dev/null || true
floor_url="postgresql://postgres@127.0.0.1:$port/floor"
PGOPTIONS=--client-min-messages=warning psql "$floor_url" -qAt -v ON_ERROR_STOP=1 <<'SQL'
DROP TABLE IF EXISTS floor_jobs, floor_renders, floor_credits;
CREATE TABLE floor_jobs (id bigserial PRIMARY KEY, kind text NOT NULL, state text NOT NULL);
CREATE TABLE floor_renders (id bigserial PRIMARY KEY, job_id bigint NOT NULL, status text NOT NULL, provider_job text);
CREATE TABLE floor_credits (user_id int PRIMARY KEY, balance int NOT NULL, reserved int NOT NULL);
INSERT INTO floor_credits SELECT g, 1000000, 0 FROM generate_series(1, 10000) g;
VACUUM ANALYZE floor_credits;
SQL

scripts=$(mktemp -d)
trap 'rm -rf "$scripts"' EXIT
echo 'SELECT 1;' >"$scripts/round_trip.sql"
cat >"$scripts/write_transaction.sql" <<'SQL'
BEGIN;
INSERT INTO floor_jobs (kind, state) VALUES ('floor', 'completed');
COMMIT;
SQL
# The render's transactions in the fleet's path, in order, with their round trips.
cat >"$scripts/render.sql" <<'SQL'
\set user random(1, 10000)
BEGIN;
SELECT count(*) FROM floor_jobs WHERE id = -1;
INSERT INTO floor_jobs (kind, state) VALUES ('render', 'available') RETURNING id AS job \gset
INSERT INTO floor_renders (job_id, status) VALUES (:job, 'queued') RETURNING id AS render \gset
SELECT balance FROM floor_credits WHERE user_id = :user FOR UPDATE;
UPDATE floor_credits SET reserved = reserved + 1 WHERE user_id = :user;
COMMIT;
SELECT pg_notify('floor_jobs', 'render');
UPDATE floor_jobs SET state = 'running' WHERE id = :job RETURNING id;
BEGIN;
SELECT count(*) FROM floor_jobs WHERE id = -1;
UPDATE floor_renders SET status = 'processing' WHERE id = :render RETURNING *;
COMMIT;
UPDATE floor_renders SET provider_job = 'request' WHERE id = :render;
BEGIN;
UPDATE floor_renders SET status = 'completed' WHERE id = :render;
UPDATE floor_credits SET reserved = reserved - 1, balance = balance - 1 WHERE user_id = :user;
UPDATE floor_jobs SET state = 'completed' WHERE id = :job;
COMMIT;
SQL

for run in $(seq 1 "$repeats"); do
  for shape in round_trip write_transaction render; do
    output=$("$root/scripts/pg-cost.sh" --dir "$dir" --port "$port" -- \
      "$pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" -f "$scripts/$shape.sql" "$floor_url" 2>&1)
    units=$(sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p' <<<"$output")
    cpu=$(sed -n 's/^pg_cost.server_cpu_seconds=//p' <<<"$output")
    wal=$(sed -n 's/^pg_cost.wal_bytes=//p' <<<"$output")
    [ -n "$units" ] && [ "$units" -gt 0 ] || { echo "$output" >&2; echo "pg-floor: pgbench ran nothing" >&2; exit 1; }
    printf '{"run": %d, "shape": "%s", "clients": %d, "units": %d, "server_cpu_us_per_unit": %.1f, "wal_bytes_per_unit": %.0f}\n' \
      "$run" "$shape" "$clients" "$units" "$(echo "$cpu * 1000000 / $units" | bc -l)" "$(echo "$wal / $units" | bc -l)"
  done
done
