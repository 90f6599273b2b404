#!/usr/bin/env bash
# Checks the fleet's production signals (CI runs it from scripts/test.sh, offline, seconds):
#  - `promtool check rules` and `promtool test rules` on deploy/prometheus/ (promtool: Debian's
#    `prometheus` package, scripts/install-deps.sh);
#  - every metric name the rules' exprs and the Grafana dashboard's queries
#    (deploy/grafana/fleet-dashboard.json: panel targets and template variables) use is one the
#    code exports: the `label:` of each swift-metrics Counter/FloatingPointCounter/Gauge/Meter/
#    Recorder/Timer call in Sources/, expanded the way swift-prometheus' PrometheusMetricsFactory
#    exports it (Timer and aggregating Recorder: a histogram, only `_bucket`, `_sum`, `_count`
#    exist; Counter: the label as is; Gauge, Meter, Recorder(aggregate: false): the label as is),
#    plus names the rules record and Prometheus' own (`up`, `ALERTS`…, listed below);
#  - every alert has severity page or ticket, a summary, a description and a runbook_url whose
#    anchor is a heading of docs/operations.md, and the unit tests make it fire at least once
#    and stay silent at least once.
# The name extraction tests itself first on expressions it must accept and must refuse.
# `--self-test` runs only that; `--exported` prints the exported names and exits.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${CHECK_SIGNALS_ROOT:-.}
mode=${1:-check}

status=0
if [ "$mode" = check ]; then
  command -v promtool >/dev/null 2>&1 || { echo "check-signals: FAIL: promtool not found (apt-get install prometheus; scripts/install-deps.sh)" >&2; exit 1; }
  promtool check rules "$ROOT/deploy/prometheus/fleet-alerts.yml" || { status=1; echo "check-signals: FAIL: promtool check rules" >&2; }
  (cd "$ROOT/deploy/prometheus" && promtool test rules fleet-alerts.test.yml) || { status=1; echo "check-signals: FAIL: promtool test rules" >&2; }
fi

python3 - "$ROOT" "$mode" <<'PY' || status=1
import glob, json, os, re, sys
import yaml

root, mode = sys.argv[1], sys.argv[2]
errors = []
def fail(msg): errors.append(msg)
def p(*parts): return os.path.join(root, *parts)

# --- what the code exports -------------------------------------------------------------------
CALL = re.compile(r'\b(Counter|FloatingPointCounter|Gauge|Meter|Recorder|Timer)\(\s*label:\s*"([^"]*)"([^)]*)', re.S)
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

def exported_names():
    names = {}  # name -> (type, where)
    for path in sorted(glob.glob(p("Sources/**/*.swift"), recursive=True)):
        text = open(path, encoding="utf-8").read()
        for m in CALL.finditer(text):
            kind, label, rest = m.group(1), m.group(2), m.group(3)
            where = f"{os.path.relpath(path, root)}:{text.count(chr(10), 0, m.start()) + 1}"
            if "\\(" in label:
                fail(f"{where}: metric label {label!r} is interpolated; the check cannot know its name")
                continue
            if kind in ("Counter", "FloatingPointCounter"):
                types = {label: "counter"}
            elif kind in ("Gauge", "Meter") or (kind == "Recorder" and re.search(r'aggregate:\s*false', rest)):
                types = {label: "gauge"}
            else:  # Timer, Recorder: histograms
                types = {label + s: "histogram" + s for s in HISTOGRAM_SUFFIXES}
            for name, t in types.items():
                names.setdefault(name, (t, where))
    return names

# Names Prometheus makes itself (scrape and alerting series), accepted in queries.
BUILTINS = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
            "scrape_series_added", "ALERTS", "ALERTS_FOR_STATE"}

# --- metric names in a PromQL expression -----------------------------------------------------
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless",
            "offset", "bool", "atan2", "inf", "nan"}

def metric_names(expr):
    """Metric names a PromQL expression selects (Grafana variables allowed)."""
    e = expr
    e = re.sub(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`', '""', e)         # string literals
    e = re.sub(r'#[^\n]*', ' ', e)                                                  # comments
    e = re.sub(r'\$\{[^}]*\}|\$\w+', ' 1 ', e)                                       # Grafana variables
    if re.search(r'__name__', e):
        raise ValueError("a selector by __name__ cannot be checked")
    e = re.sub(r'\{[^}]*\}', ' ', e)                                                 # label matchers
    e = re.sub(r'\[[^\]]*\]', ' ', e)                                                # ranges, subqueries
    e = re.sub(r'\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)', ' ', e)  # label lists
    e = re.sub(r'\b(?:by|without|on|ignoring|group_left|group_right)\b', ' ', e)
    e = re.sub(r'\boffset\s+-?[0-9][0-9a-z.]*', ' ', e)                              # offset 15m
    e = re.sub(r'(?<![\w:.])(?:0x[0-9a-fA-F]+|\d+(?:\.\d*)?(?:[eE][+-]?\d+)?(?:ms|[smhdwy])*|\.\d+(?:[eE][+-]?\d+)?)', ' ', e)  # numbers, durations
    names = []
    for m in re.finditer(r'[A-Za-z_:][A-Za-z0-9_:]*', e):
        ident = m.group(0)
        if ident.lower() in KEYWORDS:
            continue
        if re.match(r'\s*\(', e[m.end():]):
            continue                                                                 # function or aggregation
        names.append(ident)
    return names

def grafana_query_names(query):
    """Template variable queries: label_values(metric, label), label_values(label), query_result(q), metrics(re)."""
    q = query.strip()
    m = re.fullmatch(r'label_values\((.*),\s*\w+\s*\)', q, re.S)
    if m: return metric_names(m.group(1))
    if re.fullmatch(r'label_values\(\s*\w+\s*\)', q): return []
    m = re.fullmatch(r'query_result\((.*)\)', q, re.S)
    if m: return metric_names(m.group(1))
    if q.startswith("metrics("): raise ValueError("metrics(regex) cannot be checked")
    return metric_names(q)

def self_test(exported):
    known = set(exported) | BUILTINS | {"fleet:queue_lag_threshold_seconds"}
    def unknown(expr, grafana=False):
        return [n for n in (grafana_query_names(expr) if grafana else metric_names(expr)) if n not in known]
    must_pass = [
        'histogram_quantile(0.99, sum by (le, kind) (rate(fleet_job_duration_seconds_bucket{kind=~"$kind"}[$__rate_interval])))',
        'sum by (provider) (increase(fleet_renders_finished_total{outcome=~"RENDER_FAILED|RENDER_TIMEOUT"}[10m])) / ignoring(outcome) group_left sum(rate(fleet_renders_finished_total[5m]))',
        'max by (kind) (fleet_queue_dead_last_hour offset 15m) > 1e3 and on (kind) fleet_queue_paused == bool 0',
        'time() - max(fleet_queue_stats_timestamp_seconds) > 90 or absent(up{job="x"}) or vector(1)',
        'max_over_time(fleet_queue_oldest_due_seconds[1h:1m]) > on(kind) group_left() fleet:queue_lag_threshold_seconds',
        'sum(rate(fleet_job_duration_seconds_sum[5m])) / sum(rate(fleet_job_duration_seconds_count[5m]))',
        'label_replace(fleet_queue_jobs, "dst", "$1", "kind", "(.*)")',
    ]
    must_fail = [
        ('rate(fleet_jobs_claimd_total[5m])', "fleet_jobs_claimd_total"),                 # a typo
        ('sum by (kind) (fleet_job_duration_seconds)', "fleet_job_duration_seconds"),     # a histogram's bare name
        ('rate(fleet_jobs_claimed_total_bucket[5m])', "fleet_jobs_claimed_total_bucket"),  # a counter is no histogram
        ('sum(fleet_workers_live{kind="render.run"}) == 0', "fleet_workers_live"),        # not exported (yet)
        ('fleet_queue_jobs > on(kind) fleet_queue_lag_limit', "fleet_queue_lag_limit"),
    ]
    problems = []
    for expr in must_pass:
        if unknown(expr): problems.append(f"accepts {expr!r}: found unknown {unknown(expr)}")
    if unknown('label_values(fleet_queue_jobs{state="due"}, kind)', grafana=True):
        problems.append("label_values(fleet_queue_jobs, kind) should pass")
    if unknown('label_values(fleet_quue_jobs, kind)', grafana=True) != ["fleet_quue_jobs"]:
        problems.append("label_values(fleet_quue_jobs, kind) should name fleet_quue_jobs")
    for expr, name in must_fail:
        if name not in unknown(expr): problems.append(f"refuses {expr!r}: {name} not reported (got {unknown(expr)})")
    try:
        metric_names('{__name__=~"fleet_.*"}'); problems.append("refuses a __name__ selector")
    except ValueError:
        pass
    return problems

exported = exported_names()
# The expansion above assumes the registry's own names: PrometheusMetricsFactory, no sanitizer.
factory = open(p("Sources/Shared/FleetHTTP/MetricsRoutes.swift"), encoding="utf-8").read()
if "PrometheusMetricsFactory(" not in factory or "nameAndLabelSanitizer" in factory:
    fail("Sources/Shared/FleetHTTP/MetricsRoutes.swift: the metrics factory changed; update the name expansion here")
if mode == "--exported":
    for name in sorted(exported): print(f"{name}\t{exported[name][0]}\t{exported[name][1]}")
    sys.exit(0)
problems = self_test(exported)
if problems:
    for prob in problems: print(f"check-signals: FAIL: self-test: {prob}", file=sys.stderr)
    sys.exit(1)
if mode == "--self-test":
    print("check-signals: self-test OK"); sys.exit(0)
if len(exported) < 10:
    fail(f"only {len(exported)} exported metric names found under Sources/: the extraction is broken")

# --- the rules --------------------------------------------------------------------------------
rules_path = p("deploy/prometheus/fleet-alerts.yml")
rules = yaml.safe_load(open(rules_path))
recorded = {r["record"] for g in rules["groups"] for r in g["rules"] if "record" in r}
known = set(exported) | BUILTINS | recorded
queries = []  # (where, expr, is_template_query)
alerts = []
for group in rules["groups"]:
    for rule in group["rules"]:
        name = rule.get("alert") or rule.get("record")
        queries.append((f"fleet-alerts.yml: {group['name']}/{name}", rule["expr"], False))
        if "alert" in rule: alerts.append(rule)

# Runbook anchors: GitHub's heading slugs of docs/operations.md.
def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r'[^\w\- ]', '', s)
    return s.replace(' ', '-')
ops = open(p("docs/operations.md"), encoding="utf-8").read()
anchors = {slug(h) for h in re.findall(r'^#{1,6}\s+(.*)$', ops, re.M)}
for rule in alerts:
    a = rule["alert"]
    sev = rule.get("labels", {}).get("severity")
    if sev not in ("page", "ticket"): fail(f"{a}: severity {sev!r} is not page or ticket")
    ann = rule.get("annotations", {})
    for key in ("summary", "description", "runbook_url"):
        if not ann.get(key): fail(f"{a}: no {key} annotation")
    url = ann.get("runbook_url", "")
    m = re.fullmatch(r'https://github\.com/wearbloom/fleet/blob/main/docs/operations\.md#([\w-]+)', url)
    if not m: fail(f"{a}: runbook_url {url!r} is not a docs/operations.md anchor")
    elif m.group(1) not in anchors: fail(f"{a}: runbook anchor #{m.group(1)} is no heading of docs/operations.md")
    if "for" not in rule: fail(f"{a}: no `for:` duration")

# Each alert fires in a unit test and stays silent in one.
tests = yaml.safe_load(open(p("deploy/prometheus/fleet-alerts.test.yml")))
fires, silent = set(), set()
for t in tests.get("tests", []):
    for case in t.get("alert_rule_test", []):
        (fires if case.get("exp_alerts") else silent).add(case["alertname"])
for rule in alerts:
    if rule["alert"] not in fires: fail(f"{rule['alert']}: no unit test where it fires")
    if rule["alert"] not in silent: fail(f"{rule['alert']}: no unit test where it stays silent")

# --- the dashboard ----------------------------------------------------------------------------
dash_path = p("deploy/grafana/fleet-dashboard.json")
try:
    dash = json.load(open(dash_path))
except (OSError, ValueError) as e:
    fail(f"{dash_path}: {e}"); dash = {}
def panels(items):
    for panel in items or []:
        yield panel
        yield from panels(panel.get("panels"))
count = 0
for panel in panels(dash.get("panels")):
    for target in panel.get("targets", []) or []:
        if target.get("expr"):
            queries.append((f"fleet-dashboard.json: panel {panel.get('title')!r} ref {target.get('refId')}", target["expr"], False))
            count += 1
        elif panel.get("type") != "row":
            fail(f"fleet-dashboard.json: panel {panel.get('title')!r} has a target without expr")
for var in dash.get("templating", {}).get("list", []):
    if var.get("type") == "query":
        q = var.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if q: queries.append((f"fleet-dashboard.json: variable {var.get('name')}", q, True))
if dash and count == 0: fail("fleet-dashboard.json: no panel query found")

# --- names ------------------------------------------------------------------------------------
used = set()
for where, expr, template in queries:
    try:
        names = grafana_query_names(expr) if template else metric_names(expr)
    except ValueError as e:
        fail(f"{where}: {e}"); continue
    for n in names:
        used.add(n)
        if n not in known:
            hint = ""
            base = re.sub(r'_(bucket|sum|count)$', '', n)
            if n in (s[:-len('_bucket')] for s in exported if s.endswith('_bucket')): hint = " (a histogram: use _bucket, _sum or _count)"
            elif base != n and base in exported: hint = f" ({base} is a {exported[base][0]}, not a histogram)"
            fail(f"{where}: metric {n} is not exported by the code{hint}")

if errors:
    for e in errors: print(f"check-signals: FAIL: {e}", file=sys.stderr)
    sys.exit(1)
print(f"check-signals: OK: {len(alerts)} alerts, {len(queries)} queries naming {len(used)} metrics, "
      f"all among the {len(exported)} exported names (+ {len(recorded)} recorded); runbooks in docs/operations.md")
PY
exit $status
