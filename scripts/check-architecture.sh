#!/usr/bin/env bash
# docs/architecture.md's graph is Package.swift's: every dependency between the project's own
# targets is an edge of the Mermaid graph, and every edge a dependency. With --print, prints
# the graph from Package.swift (to paste into the doc after changing the targets).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 - "${1:-}" <<'PY'
import re, sys
package = open("Package.swift").read()
targets = re.findall(r'\.(?:target|executableTarget)\(\s*name: "(\w+)"', package)
ours = set(targets) - {"CCurlShims", "CVipsShims", "CSpawnShims"}
edges = set()
for m in re.finditer(r'\.(?:target|executableTarget)\(\s*name: "(\w+)",\s*dependencies: \[(.*?)\]', package, re.S):
    if m.group(1) in ours:
        edges |= {(m.group(1), d) for d in re.findall(r'"(\w+)"', m.group(2)) if d in ours}
# What a target links, its own targets and system libraries: the dependencies' closure.
direct = {}
for m in re.finditer(r'\.(?:target|executableTarget)\(\s*name: "(\w+)",\s*dependencies: \[(.*?)\]', package, re.S):
    direct[m.group(1)] = set(re.findall(r'"(\w+)"', m.group(2)))
def links(target, seen=None):
    seen = set() if seen is None else seen
    for d in direct.get(target, ()):
        if d not in seen:
            seen.add(d)
            links(d, seen)
    return seen
# The runtime knows no domain; the drill worker and the image worker link none of the render code,
# the providers or libsodium (each executable hands the runtime the schema, which is SQL only; the
# image worker's purge erases an account through RenderLedger, below Renders).
rules = {
    "FleetRuntime": {"Renders", "Providers", "Imaging", "FleetCallbacks", "FleetAccess", "LiveSettings", "CSodium", "CVips"},
    "FleetSchema": {"Renders", "Providers", "Imaging", "FleetCallbacks", "FleetAccess", "CSodium", "CVips"},
    "FleetDrill": {"Renders", "Providers", "Imaging", "FleetCallbacks", "FleetAccess", "CSodium", "CVips"},
    "ImageWorker": {"Renders", "Providers", "FleetCallbacks", "FleetAccess", "CSodium"},
}
# The providers import neither the queue nor the render store (the local composite reaches libvips
# through Imaging).
imports = {"Providers": {"FleetQueue", "FleetPostgres", "Renders"}}
broken = [f"{t} links {', '.join(sorted(links(t) & banned))}" for t, banned in rules.items() if links(t) & banned]
broken += [f"{t} depends on {', '.join(sorted(direct[t] & banned))}" for t, banned in imports.items() if direct[t] & banned]
# The queue's one way in: its types are built on an executor, and the driver behind them is
# constructed inside FleetQueue only (benches included).
import glob
for path in sorted(glob.glob("Sources/**/*.swift", recursive=True)):
    if path.startswith("Sources/Shared/FleetQueue/"):
        continue
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        if "PostgresQueueDriver(" in line:
            broken.append(f"{path}:{number} constructs the queue's driver: build JobQueue, JobControl, WorkerRuntime… on an executor")
for failure in broken:
    print(f"check-architecture: FAIL: {failure}")
if broken: sys.exit(1)
if sys.argv[1] == "--print":
    print("```mermaid\ngraph TD")
    for a, b in sorted(edges): print(f"    {a} --> {b}")
    print("```")
    sys.exit(0)
doc = open("docs/architecture.md").read()
drawn = set(re.findall(r"^\s*(\w+) --> (\w+)\s*$", doc, re.M))
missing, extra = edges - drawn, drawn - edges
for a, b in sorted(missing): print(f"check-architecture: FAIL: {a} --> {b} is in Package.swift, not in docs/architecture.md")
for a, b in sorted(extra): print(f"check-architecture: FAIL: {a} --> {b} is in docs/architecture.md, not in Package.swift")
if missing or extra: sys.exit(1)
print(f"check-architecture: OK ({len(edges)} dependencies between {len(ours)} targets drawn; {', '.join(rules)} link no domain they must not; no driver built outside FleetQueue)")
PY
