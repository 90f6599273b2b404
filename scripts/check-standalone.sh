#!/usr/bin/env bash
# A clone of this repository needs nothing beside it. In a fresh clone of the committed HEAD,
# in an empty folder of mode 0700 with nothing beside it:
#  1. no tracked file other than documentation reads the team's reference folder beside the
#     clone (docs may cite it as reading matter; nothing may load it at run time);
#  2. every photo the tests, the demo and fleet-bench name is in Tests/Fixtures/corpus, every
#     repository path the Swift code names as a literal exists, and each `packageRoot`
#     (#filePath minus N components) is the clone's root, so the tests' and fleet-bench's
#     fixture paths resolve inside the clone; a script that edits a cluster's files (chaos.sh's
#     pg_hba.conf) asks `scripts/pg.sh dir` where the cluster is;
#  3. as root, the embedded PostgreSQL starts, answers (`url`), reports (`status`), restarts and
#     stops although the clone sits in a folder `postgres` cannot enter (mode 0700, as root's
#     home is): scripts/pg.sh keeps the cluster under /var/lib/postgresql/wearbloom/ instead.
# A full build and the demo in that clone would prove the same at the cost of a second debug
# build (about 12 minutes on CI's 2 cores); these checks cover what that build would read, in
# about 10 seconds.
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
[ ! -e ../shared ] || fail "the check folder has a shared folder beside the clone"

# 1. Any tracked file but Markdown (docs may name the reference folder as reading matter).
if git grep -nIE '[.][.]/shared|/work/shared|"shared/corpus"|appendingPathComponent\("shared' -- . \
    ':!*.md' ':!scripts/check-standalone.sh'; then
  fail "the lines above read outside the repository"
fi

# 2. Photos named anywhere in the code, the tests and the scripts.
photos=$(git grep -hoE '[a-z]+-[0-9]+x[0-9]+(-[a-z0-9]+)?\.(jpg|jpeg|heic|webp|png)' -- Sources Tests scripts ':!Tests/Fixtures' | sort -u)
[ -n "$photos" ] || fail "found no photo names in Sources, Tests or scripts"
for photo in $photos; do
  [ -f "Tests/Fixtures/corpus/$photo" ] || fail "$photo is named but not in Tests/Fixtures/corpus"
done
# Every file of the corpus is one the tests name (fleet-bench reads the whole folder).
for file in $(git ls-files Tests/Fixtures/corpus | grep -v '\.md$'); do
  echo "$photos" | grep -qxF "$(basename "$file")" || fail "$file is in the repository but nothing names it"
done
[ -f Tests/Fixtures/corpus/README.md ] || fail "Tests/Fixtures/corpus has no README (licence)"
# Repository paths written as whole literals in Swift (fixtures, the demo's garment, scripts).
for path in $(git grep -hoE '"(Tests|scripts|Sources|deploy|clients)/[^"\\ ]*"' -- '*.swift' | tr -d '"' | sort -u); do
  [ -e "$path" ] || fail "a Swift literal names $path, which is not in the clone"
done
# packageRoot = URL(fileURLWithPath: #filePath) minus N path components must be the root.
roots=0
for file in $(git grep -l 'packageRoot = URL(fileURLWithPath: #filePath)' -- '*.swift'); do
  n=$(sed -n '/packageRoot = URL(fileURLWithPath: #filePath)/,/^ *$/p' "$file" | grep -o deletingLastPathComponent | wc -l)
  top=$file
  for _ in $(seq "$n"); do top=$(dirname "$top"); done
  [ "$top" = . ] || fail "$file: packageRoot drops $n components and lands on $top, not the clone's root"
  roots=$((roots + 1))
done
[ "$roots" -gt 0 ] || fail "found no packageRoot definition"
# A script that opens a cluster's own files asks scripts/pg.sh where the cluster is: as root it
# may not be under .data (step 3).
for file in $(git grep -lE 'pg_hba\.conf|postgresql\.conf|postmaster\.pid|PG_VERSION|server\.log' -- '*.sh' \
    ':!scripts/pg.sh' ':!scripts/check-standalone.sh'); do
  grep -q 'scripts/pg.sh dir' "$file" || fail "$file opens a cluster's files without asking scripts/pg.sh dir where it is"
done

# 3. The embedded database from a clone in a 0700 folder.
if [ "$(id -u)" -eq 0 ]; then
  [ "$(stat -c %a "$work")" = 700 ] || fail "the check folder is not mode 0700"
  runuser -u postgres -- test -x "$work/clone" && fail "postgres can enter the check folder: nothing is proven"
  pg() { scripts/pg.sh "$1" --dir .data/standalone-check --port "$port" "${@:2}"; }
  port=$(scripts/pg.sh pick-port --dir .data/standalone-check --port 15400)
  cluster=$(pg dir)
  case $cluster in "$work"/*) fail "pg.sh keeps the cluster inside the 0700 folder ($cluster)" ;; esac
  pg start --fast >/dev/null || fail "scripts/pg.sh start failed from a 0700 clone"
  [ -f "$cluster/PG_VERSION" ] || fail "the cluster is not where scripts/pg.sh dir says ($cluster)"
  pg status >/dev/null || fail "scripts/pg.sh status does not find the running cluster"
  [ "$(psql "$(pg url)" -tAc 'SELECT 1')" = 1 ] || fail "the embedded PostgreSQL in a 0700 clone does not answer"
  pg restart
  [ "$(psql "$(pg url)" -tAc 'SELECT 1')" = 1 ] || fail "the cluster does not answer after scripts/pg.sh restart"
  pg stop
  if pg status >/dev/null; then fail "the cluster did not stop"; fi
  echo "check-standalone: OK ($(echo "$photos" | wc -w) fixture photos, $roots packageRoot definitions; PostgreSQL from a 0700 clone kept in $cluster)"
else
  echo "check-standalone: OK ($(echo "$photos" | wc -w) fixture photos, $roots packageRoot definitions; not root: the 0700 case is root's and was skipped)"
fi
