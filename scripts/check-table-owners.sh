#!/usr/bin/env bash
# Every table has one module that owns it: SQL naming a table (FROM, JOIN, INTO, UPDATE, TABLE)
# stands only in its owner's folder, its migrations included. Other modules ask
# the owner (the console asks the queue's and the renders' stores; renders enqueue their jobs
# through JobQueue). The tools that seed and measure (Sources/FleetBench, the demo playing a
# backend, Tests/) are not modules of the fleet and are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - <<'PY'
import os, re, sys
owners = {
    "jobs": "Sources/Shared/FleetQueue/",
    "renders": "Sources/Shared/Renders/",
    "credits": "Sources/Shared/Renders/",
    "credit_ledger": "Sources/Shared/Renders/",
    "credit_reservations": "Sources/Shared/Renders/",
}
tools = ("Sources/FleetBench/", "Sources/FleetDemo/", "Sources/Shared/FakeProviders/")
pattern = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE)\s+(" + "|".join(owners) + r")\b(?!\s*\()")
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
