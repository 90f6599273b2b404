#!/usr/bin/env bash
# Runs the whole test suite on a fresh machine: installs the Debian packages if missing,
# starts a throwaway PostgreSQL (fsync off) under .data/test-postgres, builds, runs
# `swift test`, and stops the database again.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
dir=.data/test-postgres
port=54330
scripts/pg.sh start --dir "$dir" --port "$port" --fast >/dev/null
trap 'scripts/pg.sh stop --dir "$dir" --port "$port"' EXIT
FLEET_TEST_DATABASE_URL=$(scripts/pg.sh url --port "$port")
export FLEET_TEST_DATABASE_URL
swift build --build-tests
swift test --skip-build --disable-xctest
