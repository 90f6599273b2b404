#!/usr/bin/env bash
# A clone of this repository needs nothing beside it. In a fresh clone of the committed HEAD,
# in an empty folder with nothing beside it:
#  1. no source, test, script, benchmark or deploy file reads outside the repository (`../`);
#  2. every photo the tests, the demo and fleet-bench name is in Tests/Fixtures/corpus;
#  3. as root, the embedded PostgreSQL starts, answers and stops although the clone sits in a
#     folder only root can enter (mode 0700, as root's home is): scripts/pg.sh keeps the
#     cluster where `postgres` can reach it.
# A full build and the demo in that clone would prove the same at the cost of a second build
# (about 12 minutes on CI's 2 cores); these checks cover what the build would read.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)   # mode 0700: `postgres` cannot enter it
cluster=""
cleanup() {
  if [ -n "$cluster" ]; then
    (cd "$work/clone" && scripts/pg.sh stop --dir .data/standalone-check --port "$port" >/dev/null 2>&1) || true
    rm -rf "$cluster" "$cluster.initdb.log"
    # Its folder under /var/lib/postgresql/wearbloom, made for this check alone.
    case $cluster in /var/lib/postgresql/wearbloom/*) rmdir "$(dirname "$cluster")" 2>/dev/null || true ;; esac
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "check-standalone: FAIL: $*" >&2; exit 1; }

git clone -q . "$work/clone"
cd "$work/clone"

if git grep -nE '\.\./shared|"shared[/]corpus"|appendingPathComponent\("shared' -- \
    '*.swift' '*.sh' '*.py' '*.js' '*.ts' '*.yml' '*.yaml' '*Dockerfile' ':!scripts/check-standalone.sh'; then
  fail "the lines above read outside the repository"
fi

photos=$(git grep -hoE '[a-z]+-[0-9]+x[0-9]+(-[a-z0-9]+)?\.(jpg|jpeg|heic|webp|png)' -- Sources Tests scripts | sort -u)
[ -n "$photos" ] || fail "found no photo names in Sources, Tests or scripts"
for photo in $photos; do
  [ -f "Tests/Fixtures/corpus/$photo" ] || fail "$photo is named but not in Tests/Fixtures/corpus"
done

if [ "$(id -u)" -eq 0 ]; then
  [ "$(stat -c %a "$work")" = 700 ] || fail "the check folder is not mode 0700"
  port=$(scripts/pg.sh pick-port --dir .data/standalone-check --port 15400)
  cluster=$(scripts/pg.sh dir --dir .data/standalone-check --port "$port")
  url=$(scripts/pg.sh start --dir .data/standalone-check --port "$port" --fast 2>/dev/null)
  [ "$(psql "$url" -tAc 'SELECT 1')" = 1 ] || fail "the embedded PostgreSQL in a 0700 clone does not answer"
  scripts/pg.sh stop --dir .data/standalone-check --port "$port"
  scripts/pg.sh status --dir .data/standalone-check --port "$port" >/dev/null && fail "the cluster did not stop"
  echo "check-standalone: OK ($(echo "$photos" | wc -l) fixture photos; PostgreSQL from a 0700 clone kept in $cluster)"
else
  echo "check-standalone: OK ($(echo "$photos" | wc -l) fixture photos; not root: the 0700 case is root's and was skipped)"
fi
