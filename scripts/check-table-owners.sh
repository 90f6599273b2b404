#!/usr/bin/env bash
# Every table has one module that owns it: the module whose `Migrations/` folder creates it (the
# migrations runner's own `schema_migrations` is FleetPostgres'). SQL naming a table (FROM, JOIN,
# INTO, UPDATE, TABLE) stands only in its owner's folder; other modules ask the owner (the console
# asks the queue's and the renders' stores; renders enqueue their jobs through JobQueue and read
# limits through ConcurrencyLimits). The tools that seed and measure (Sources/FleetBench, the demo
# playing a backend, the fake providers, Tests/) are not modules of the fleet and are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import glob, os, re, sys
owners = {"schema_migrations": "Sources/Shared/FleetPostgres/"}
for path in sorted(glob.glob("Sources/Shared/*/Migrations/*.swift")):
    module = path.split("/")[2]
    for table in re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", open(path, encoding="utf-8").read()):
        if owners.get(table, f"Sources/Shared/{module}/") != f"Sources/Shared/{module}/":
            print(f"check-table-owners: FAIL: `{table}` is created by {owners[table]} and by {module}")
            sys.exit(1)
        owners[table] = f"Sources/Shared/{module}/"
tools = ("Sources/FleetBench/", "Sources/FleetDemo/", "Sources/Shared/FakeProviders/")
pattern = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+(" + "|".join(sorted(owners)) + r")\b(?!\s*\()")
failures = 0
for root, _, files in os.walk("Sources"):
    for name in files:
        path = os.path.join(root, name)
        if not name.endswith(".swift") or path.startswith(tools):
            continue
        for number, line in enumerate(open(path, encoding="utf-8"), 1):
            for table in pattern.findall(line):
                if not path.startswith(owners[table]):
                    print(f"check-table-owners: FAIL: {path}:{number} names `{table}`, which {owners[table]} owns: ask that module")
                    failures += 1
if failures:
    sys.exit(1)
print(f"check-table-owners: OK ({len(owners)} tables, each named only by its owner)")
PY
