#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs the Debian packages if missing,
# starts a throwaway PostgreSQL (fsync off) under .data/test-postgres on port
# FLEET_TEST_PG_PORT (default: the first free port from 15330) and a PgBouncer in transaction
# mode in front of it (FLEET_TEST_PGBOUNCER_PORT, default: the next free port), builds, runs `swift test`, then the Node client's tests
# (node --test) against the built dispatcher, the console's browser test, the short multi-host chaos run
# (scripts/chaos.sh --short, with files, then with the S3 gateway and no shared disk), and stops the database. Before the build: deploy/ (check-deploy.sh),
# the alert rules and dashboard (check-signals.sh), a standalone clone, the architecture graph,
# the tables' owners. The failover drill and the replica-read test make primaries and standbys
# of their own (ports from FLEET_FAILOVER_PG_PORT, 15400, and FLEET_TEST_STANDBY_PG_PORT, 15410).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
dir=.data/test-postgres
port=${FLEET_TEST_PG_PORT:-$(scripts/pg.sh pick-port --dir "$dir" --port 15330)}
bouncer_port=${FLEET_TEST_PGBOUNCER_PORT:-$(scripts/pg.sh pick-port --dir .data/none --port $((port + 1)))}
# The S3 gateway the object storage tests start on first use (Tests/FleetTestSupport/S3Gateway.swift)
# goes too; `|| true`: a machine without Ceph never started one.
trap 'scripts/pgbouncer.sh stop --port "$bouncer_port"; scripts/pg.sh stop --dir "$dir" --port "$port"
      scripts/s3.sh stop --dir .data/s3-test >/dev/null 2>&1 || true' EXIT
scripts/pg.sh start --dir "$dir" --port "$port" --fast >/dev/null
# Every test makes a database of its own (t_…) and leaves it for a failed run's post-mortem; the
# cluster lives on between runs (a day of runs filled 53 GB and the disk): the last run's go now.
PGOPTIONS=--client-min-messages=warning psql "postgresql://postgres@127.0.0.1:$port/postgres" -Atq \
  -c "SELECT format('DROP DATABASE %I WITH (FORCE);', datname) FROM pg_database WHERE datname LIKE 't\_%'" \
  | PGOPTIONS=--client-min-messages=warning psql "postgresql://postgres@127.0.0.1:$port/postgres" -q >/dev/null
scripts/pgbouncer.sh start --port "$bouncer_port" --pg-port "$port" --pool-size 8 --mode transaction >/dev/null
export FLEET_TEST_PG_PORT=$port FLEET_TEST_PG_STARTED=1 FLEET_TEST_PGBOUNCER_PORT=$bouncer_port FLEET_TEST_PGBOUNCER_STARTED=1
# Swift Testing starts every test at once by default. The tests wait for states, not times, so the
# width is not about load: it is the test cluster's connections. max_connections is 1000
# (scripts/pg.sh); a test holds at most its own pool (10) plus the pools of the processes it
# starts (a dispatcher, an image and a render worker: 8 each, a LISTEN session, the image worker's
# settings and purge pools), about 60 at the worst, so 16 at once stay within 1000 whatever runs
# together (the processes' memory, about 100 MB each, is far from the limit at that width).
export SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH=${SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH:-16}
bash scripts/check-deploy.sh   # deploy/ manifests, offline, under a second
bash scripts/check-signals.sh  # alert rules (promtool check/test), runbooks, dashboard queries vs exported metrics
bash scripts/check-standalone.sh   # a fresh clone needs nothing beside it (fixtures, a 0700 folder)
bash scripts/check-architecture.sh # docs/architecture.md's graph is Package.swift's
bash scripts/check-table-owners.sh # SQL names a table only in the module that owns it
swift build --build-tests
# The dispatcher's protocol suites open hundreds of connections and fuzz at once: they run on
# their own, so their bursts do not upset the suites that measure timing; the exhaustion suite
# measures latency and the process's memory under attack, so it runs alone. The limits' suites
# run seven worker processes or claim for two minutes: on their own too. Beside the dispatcher's
# suites (their 100 ms frame timeout) they made a fresh clone's run fail twice in one go: a frame
# cut off while the server was starved, and a render worker whose exit after SIGTERM was not 0
# within 30 s.
dispatcher_suites='DispatcherProtocolTests|DispatcherOperationTests|HostileFrameTests'
limits_suites='ProviderCapacityTests|ConcurrencyLimitTests'
alone='ResourceExhaustionTests'
# 40 worker processes draining through PgBouncer: on their own as well.
pooler_suites='PgBouncerTests'
# A primary stopped and its standby promoted under load, with resume times measured: alone too.
replica_suites='FailoverDrillTests|ReplicaReadTests'
swift test --skip-build --disable-xctest --skip "$dispatcher_suites|$limits_suites|$alone|$pooler_suites|$replica_suites"
swift test --skip-build --disable-xctest --filter "$dispatcher_suites"
swift test --skip-build --disable-xctest --filter "$limits_suites"
swift test --skip-build --disable-xctest --filter "$alone"
swift test --skip-build --disable-xctest --filter "$pooler_suites"
swift test --skip-build --disable-xctest --filter "$replica_suites"

command -v node >/dev/null || { echo "test.sh: node (18 or later) is needed for the Node client's tests" >&2; exit 1; }
PGOPTIONS=--client-min-messages=warning psql "postgresql://postgres@127.0.0.1:$port/postgres" -q \
  -c "DROP DATABASE IF EXISTS node_client" -c "CREATE DATABASE node_client"
DISPATCHER_BIN_DIR=$(swift build --show-bin-path) DATABASE_URL="postgresql://postgres@127.0.0.1:$port/node_client" \
  node --test clients/node/test/

# The operator console in a real browser (Debian's chromium, Selenium from PyPI in a virtualenv).
PGOPTIONS=--client-min-messages=warning psql "postgresql://postgres@127.0.0.1:$port/postgres" -q \
  -c "DROP DATABASE IF EXISTS console_browser" -c "CREATE DATABASE console_browser"
[ -x .data/console-venv/bin/python ] || python3 -m venv .data/console-venv
.data/console-venv/bin/pip install -q 'selenium>=4.20,<5'
DISPATCHER_BIN_DIR=$(swift build --show-bin-path) DATABASE_URL="postgresql://postgres@127.0.0.1:$port/console_browser" \
  .data/console-venv/bin/python scripts/console-browser-test.py

# Horizontal scaling and chaos across network namespaces (root and ip netns; a short version).
scripts/chaos.sh --short
# The same chaos with the images in a bucket and no disk shared between the workers (about a
# minute: the gateway starts in about 15 s; no scaling phase). It starts and stops its own gateway.
scripts/chaos.sh --short --storage s3
