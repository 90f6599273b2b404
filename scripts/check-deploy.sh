#!/usr/bin/env bash
# Offline check of deploy/ (CI runs it from scripts/test.sh; needs bash, python3 + PyYAML,
# optionally kubectl and systemd-analyze). No Docker engine or cluster is needed: the image is
# not built and nothing is applied. Exits non-zero, naming every problem, when:
#  - a YAML file under deploy/ does not parse;
#  - `kubectl kustomize deploy/k8s` fails (when kubectl exists), or a kustomization resource is missing;
#  - a Deployment lacks liveness/readiness HTTP probes on /healthz and /readyz, resources
#    (requests and memory limit), or terminationGracePeriodSeconds >= grace + 5 s;
#  - a ScaledObject names no existing Deployment, a trigger is not postgresql, has no
#    targetQueryValue or authenticationRef to an existing TriggerAuthentication, or its query
#    names a kind no JobPayload declares (`static let kind`, Sources/) or one the
#    target Deployment's executable does not run;
#  - a PodDisruptionBudget is missing for a Deployment, or a claim / ConfigMap / Secret referenced
#    by a pod is not defined (Secrets: in deploy/k8s/secrets.example.yaml);
#  - docker-compose.yml: a service uses an undefined named volume, depends on an unknown service,
#    a fleet service has no healthcheck or a stop_grace_period below grace + 5 s;
#  - an environment variable set in a manifest, the compose file or deploy/env.example is not in
#    docs/configuration.md (except the listed compose-only names), or env.example
#    misses a documented variable;
#  - the Dockerfile lacks the Swift 6.3 bookworm build stage, the bookworm-slim runtime stage,
#    a runtime package, a non-root USER or the /data/images volume; no .dockerignore excludes
#    .build, .data and .bench;
#  - deploy/k8s-object-storage (rendered, with kubectl) keeps a PVC or a mount of /data/images, sets no
#    FLEET_STORAGE=s3://, or gives a container no AWS keys from a Secret in secrets.example.yaml;
#    docker-compose.object-storage.yml does not give each fleet service FLEET_STORAGE=s3:// and
#    documented variables, or its gateway has no healthcheck;
#  - systemd-analyze verify (when present) reports anything, or a unit's TimeoutStopSec is below
#    grace + 5 s.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=${CHECK_DEPLOY_ROOT:-.}

# Renders the kustomization in $1 into the file $2, or stops naming what failed.
render() {
  if ! kubectl kustomize "$ROOT/$1" >"$2" 2>"$2.err"; then
    echo "check-deploy: FAIL: kubectl kustomize $ROOT/$1:" >&2; cat "$2.err" >&2; rm -f "$2.err"
    exit 1
  fi
  rm -f "$2.err"
}

rendered=""
rendered_object_storage=""
if command -v kubectl >/dev/null 2>&1; then
  rendered=$(mktemp)
  rendered_object_storage=$(mktemp)
  trap 'rm -f "$rendered" "$rendered_object_storage"' EXIT
  render deploy/k8s "$rendered"
  render deploy/k8s-object-storage "$rendered_object_storage"
else
  echo "check-deploy: kubectl not found; checking the kustomization's resources without rendering" >&2
fi

units_tmp=""
if command -v systemd-analyze >/dev/null 2>&1; then
  units_tmp=$(mktemp -d)
  trap 'rm -f "$rendered" "$rendered_object_storage"; rm -rf "$units_tmp"' EXIT
  mkdir -p "$units_tmp/bin"
  for exe in dispatcher render-worker image-worker fleet-drill fleet-demo; do
    printf '#!/bin/sh\n' >"$units_tmp/bin/$exe"; chmod +x "$units_tmp/bin/$exe"
  done
fi

python3 - "$ROOT" "$rendered" "$units_tmp" "$rendered_object_storage" <<'EOF'
import glob, os, re, subprocess, sys
import yaml

root, rendered, units_tmp, rendered_object_storage = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
errors = []
def fail(msg): errors.append(msg)
def p(*parts): return os.path.join(root, *parts)

# ---- the sources of truth -------------------------------------------------------------------
doc = open(p("docs/configuration.md")).read()
documented = set(re.findall(r"^\|\s*`([A-Z][A-Z0-9_]+)`\s*\|", doc, re.M))
if len(documented) < 30:
    fail(f"docs/configuration.md: only {len(documented)} variables found in its tables")
# Names used by deploy/ that docs/configuration.md does not list:
COMPOSE_ONLY = {"FLEET_IMAGE", "POSTGRES_PASSWORD", "POSTGRES_USER", "POSTGRES_DB",
                "RENDER_WORKER_REPLICAS", "IMAGE_WORKER_REPLICAS",
                "DISPATCHER_SOCKET_PORT", "DISPATCHER_HTTP_PORT"}
def env_ok(name): return name in documented or re.fullmatch(r"PG[A-Z]+", name)

# The kinds the fleet runs: each payload type declares its kind and what runs it.
catalogue = {}
for swift in glob.glob(p("Sources/**/*.swift"), recursive=True):
    for kind, desc in re.findall(r'static let kind: JobKind = "([^"]+)"\s*\n\s*public static let summary = "([^"]*)"', open(swift).read()):
        catalogue[kind] = desc
if not catalogue:
    fail("Sources: no JobPayload kinds found (static let kind: JobKind = …, then static let summary = …)")
def executable_of(kind):    # "render worker: …" -> render-worker
    m = re.match(r"(\w+) worker:", catalogue.get(kind, ""))
    return f"{m.group(1)}-worker" if m else None

grace = 25
m = re.search(r"^FLEET_SHUTDOWN_GRACE_SECONDS=(\d+)", open(p("deploy/env.example")).read(), re.M)
if m: grace = int(m.group(1))
min_stop = grace + 5

# ---- every YAML file parses -----------------------------------------------------------------
docs_by_file = {}
for path in sorted(glob.glob(p("deploy/**/*.yaml"), recursive=True) + glob.glob(p("deploy/**/*.yml"), recursive=True)):
    try:
        docs_by_file[os.path.relpath(path, root)] = [d for d in yaml.safe_load_all(open(path)) if d is not None]
    except yaml.YAMLError as e:
        fail(f"{os.path.relpath(path, root)}: YAML does not parse: {e}")

# ---- Kubernetes -------------------------------------------------------------------------------
kust_path = "deploy/k8s/kustomization.yaml"
kust = (docs_by_file.get(kust_path) or [{}])[0]
objects = []
if rendered:
    try:
        objects = [d for d in yaml.safe_load_all(open(rendered)) if d]
    except yaml.YAMLError as e:
        fail(f"kubectl kustomize output does not parse: {e}")
else:
    for res in kust.get("resources", []):
        rel = os.path.normpath(os.path.join("deploy/k8s", res))
        if rel not in docs_by_file: fail(f"{kust_path}: resource {res} is missing or does not parse")
        objects += docs_by_file.get(rel, [])
if not kust.get("resources"): fail(f"{kust_path}: no resources")
secrets = {}
for d in docs_by_file.get("deploy/k8s/secrets.example.yaml", []):
    if d.get("kind") == "Secret":
        secrets[d["metadata"]["name"]] = set((d.get("stringData") or {}) | (d.get("data") or {}))

by_kind = {}
for o in objects:
    by_kind.setdefault(o.get("kind"), {})[o.get("metadata", {}).get("name")] = o
deployments = by_kind.get("Deployment", {})
configmaps = by_kind.get("ConfigMap", {})
pvcs = by_kind.get("PersistentVolumeClaim", {})
for want in ("dispatcher", "render-worker", "image-worker"):
    if want not in deployments: fail(f"k8s: no Deployment {want}")
for name, cm in configmaps.items():
    for key in (cm.get("data") or {}):
        if not env_ok(key): fail(f"k8s ConfigMap {name}: {key} is not in docs/configuration.md")
cm_grace = int(((configmaps.get("fleet-config") or {}).get("data") or {}).get("FLEET_SHUTDOWN_GRACE_SECONDS", grace))
min_k8s = max(min_stop, cm_grace + 5, 30)

def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in (selector.get("matchLabels") or {}).items())

for name, dep in deployments.items():
    where = f"k8s Deployment {name}"
    pod = dep["spec"]["template"]["spec"]
    tgp = pod.get("terminationGracePeriodSeconds")
    if not isinstance(tgp, int) or tgp < min_k8s:
        fail(f"{where}: terminationGracePeriodSeconds {tgp} < {min_k8s} (FLEET_SHUTDOWN_GRACE_SECONDS {cm_grace} + 5)")
    sc = pod.get("securityContext") or {}
    if not sc.get("runAsNonRoot"): fail(f"{where}: securityContext.runAsNonRoot is not true")
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for v in volumes.values():
        claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
        if claim and claim not in pvcs: fail(f"{where}: volume {v['name']} claims undefined PVC {claim}")
        sec = v.get("secret")
        if sec and sec.get("secretName") not in secrets: fail(f"{where}: volume {v['name']}: Secret {sec.get('secretName')} not in secrets.example.yaml")
    for c in pod.get("containers", []):
        cw = f"{where} container {c['name']}"
        ports = {pt.get("name"): pt.get("containerPort") for pt in c.get("ports", [])}
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            hg = (c.get(probe) or {}).get("httpGet")
            if not hg: fail(f"{cw}: no {probe} httpGet"); continue
            if hg.get("path") != path: fail(f"{cw}: {probe} path {hg.get('path')} (want {path})")
            if isinstance(hg.get("port"), str) and hg["port"] not in ports: fail(f"{cw}: {probe} port {hg['port']} is not a named port")
        res = c.get("resources") or {}
        if not (res.get("requests") or {}).get("cpu") or not (res.get("requests") or {}).get("memory"):
            fail(f"{cw}: resources.requests needs cpu and memory")
        if not (res.get("limits") or {}).get("memory"): fail(f"{cw}: resources.limits.memory missing")
        args = c.get("args") or c.get("command") or []
        if not args or args[0] != name: fail(f"{cw}: args {args} do not start with the executable {name}")
        for e in c.get("env", []):
            if not env_ok(e["name"]): fail(f"{cw}: env {e['name']} is not in docs/configuration.md")
            ref = (e.get("valueFrom") or {}).get("secretKeyRef")
            if ref and ref.get("key") not in secrets.get(ref.get("name"), set()):
                fail(f"{cw}: env {e['name']} refers to Secret {ref.get('name')} key {ref.get('key')}, not in secrets.example.yaml")
        for ef in c.get("envFrom", []):
            ref = (ef.get("configMapRef") or {}).get("name")
            if ref and ref not in configmaps: fail(f"{cw}: envFrom ConfigMap {ref} is not defined")
        for vm in c.get("volumeMounts", []):
            if vm["name"] not in volumes: fail(f"{cw}: volumeMount {vm['name']} has no volume")
    labels = dep["spec"]["template"]["metadata"].get("labels", {})
    if not any(labels_match(pdb["spec"].get("selector", {}), labels) for pdb in by_kind.get("PodDisruptionBudget", {}).values()):
        fail(f"{where}: no PodDisruptionBudget selects its pods")
    if not labels_match(dep["spec"].get("selector", {}), labels): fail(f"{where}: selector does not match the pod labels")

svc = by_kind.get("Service", {}).get("fleet-dispatcher")
if not svc: fail("k8s: no Service fleet-dispatcher")
else:
    names = {pt.get("name") for pt in svc["spec"].get("ports", [])}
    if not {"socket", "http"} <= names: fail(f"k8s Service fleet-dispatcher: ports {sorted(names)} (want socket and http)")
for name, pvc in pvcs.items():
    if "ReadWriteMany" not in pvc["spec"].get("accessModes", []): fail(f"k8s PVC {name}: not ReadWriteMany")

auths = by_kind.get("TriggerAuthentication", {})
for name, ta in auths.items():
    for ref in ta["spec"].get("secretTargetRef", []):
        if ref.get("key") not in secrets.get(ref.get("name"), set()):
            fail(f"k8s TriggerAuthentication {name}: Secret {ref.get('name')} key {ref.get('key')} not in secrets.example.yaml")
scaled = by_kind.get("ScaledObject", {})
for want in ("render-worker", "image-worker"):
    if not any(so["spec"]["scaleTargetRef"]["name"] == want for so in scaled.values()):
        fail(f"k8s: no ScaledObject scales {want}")
for name, so in scaled.items():
    where = f"k8s ScaledObject {name}"
    if so.get("apiVersion") != "keda.sh/v1alpha1": fail(f"{where}: apiVersion {so.get('apiVersion')}")
    target = so["spec"]["scaleTargetRef"]["name"]
    if target not in deployments: fail(f"{where}: scaleTargetRef {target} is not a Deployment")
    lo, hi = so["spec"].get("minReplicaCount"), so["spec"].get("maxReplicaCount")
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi and hi > 0):
        fail(f"{where}: minReplicaCount/maxReplicaCount {lo}/{hi}")
    covered = set()
    for t in so["spec"].get("triggers", []):
        tw = f"{where} trigger {t.get('name')}"
        if t.get("type") != "postgresql": fail(f"{tw}: type {t.get('type')} (want postgresql)")
        md = t.get("metadata") or {}
        try: float(md.get("targetQueryValue"))
        except (TypeError, ValueError): fail(f"{tw}: targetQueryValue {md.get('targetQueryValue')!r} is not a number")
        if (t.get("authenticationRef") or {}).get("name") not in auths: fail(f"{tw}: authenticationRef is not a TriggerAuthentication here")
        kinds = re.findall(r"kind\s*=\s*'([^']+)'", md.get("query", ""))
        if not kinds or "FROM jobs" not in md.get("query", ""): fail(f"{tw}: query does not count jobs of a kind: {md.get('query')!r}")
        for k in kinds:
            if k not in catalogue: fail(f"{tw}: kind {k} is not a kind the fleet declares")
            elif executable_of(k) != target: fail(f"{tw}: kind {k} runs on {executable_of(k)}, not {target}")
            covered.add(k)
    for k in catalogue:
        if executable_of(k) == target and k not in covered: fail(f"{where}: no trigger for {k}, which {target} runs")

# ---- Kubernetes with object storage (deploy/k8s-object-storage) -------------------------------------
# The same Deployments with no shared volume: no PVC, no volume claiming one, FLEET_STORAGE a bucket,
# and the keys from a Secret defined in secrets.example.yaml.
if rendered_object_storage:
    variant = [d for d in yaml.safe_load_all(open(rendered_object_storage)) if d]
    where = "k8s-object-storage"
    if any(o.get("kind") == "PersistentVolumeClaim" for o in variant): fail(f"{where}: a PersistentVolumeClaim is left")
    config = next((o for o in variant if o.get("kind") == "ConfigMap" and o["metadata"]["name"] == "fleet-config"), {})
    if not str((config.get("data") or {}).get("FLEET_STORAGE", "")).startswith("s3://"): fail(f"{where}: fleet-config sets no FLEET_STORAGE=s3://…")
    for key in (config.get("data") or {}):
        if not env_ok(key): fail(f"{where} ConfigMap fleet-config: {key} is not in docs/configuration.md")
    variant_deployments = {o["metadata"]["name"]: o for o in variant if o.get("kind") == "Deployment"}
    if set(variant_deployments) != set(deployments): fail(f"{where}: Deployments {sorted(variant_deployments)} (want {sorted(deployments)})")
    for name, dep in variant_deployments.items():
        pod = dep["spec"]["template"]["spec"]
        if any(v.get("persistentVolumeClaim") for v in pod.get("volumes", [])): fail(f"{where} Deployment {name}: a volume claims a PVC")
        for c in pod.get("containers", []):
            names = {e["name"] for e in c.get("env", [])}
            if not {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= names: fail(f"{where} Deployment {name}: no AWS keys in its env")
            if any(vm.get("mountPath") == "/data/images" for vm in c.get("volumeMounts", [])): fail(f"{where} Deployment {name}: /data/images is mounted")
            for e in c.get("env", []):
                ref = (e.get("valueFrom") or {}).get("secretKeyRef")
                if ref and ref.get("key") not in secrets.get(ref.get("name"), set()):
                    fail(f"{where} Deployment {name}: env {e['name']} refers to Secret {ref.get('name')} key {ref.get('key')}, not in secrets.example.yaml")

# ---- docker compose ---------------------------------------------------------------------------
compose = (docs_by_file.get("deploy/docker-compose.yml") or [None])[0]
def seconds(v):
    m = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", str(v or ""))
    return int(m.group(1) or 0) * 60 + int(m.group(2) or 0) if m and v else None
if not compose: fail("deploy/docker-compose.yml: missing")
else:
    services, volumes = compose.get("services", {}), set((compose.get("volumes") or {}))
    for want in ("postgres", "migrate", "dispatcher", "render-worker", "image-worker"):
        if want not in services: fail(f"compose: no service {want}")
    pg = services.get("postgres", {})
    if "15" not in str(pg.get("image", "")): fail("compose postgres: image is not PostgreSQL 15")
    if not pg.get("healthcheck"): fail("compose postgres: no healthcheck")
    if "migrate" in services and services["migrate"].get("command") != ["dispatcher", "migrate"]:
        fail("compose migrate: command is not [dispatcher, migrate]")
    for name, s in services.items():
        where = f"compose service {name}"
        for v in s.get("volumes", []):
            src = v.split(":")[0] if isinstance(v, str) else v.get("source")
            if src and not src.startswith((".", "/", "$")) and src not in volumes:
                fail(f"{where}: volume {src} is not defined under volumes:")
        deps = s.get("depends_on") or {}
        for dep in (deps if isinstance(deps, (list, dict)) else []):
            if dep not in services: fail(f"{where}: depends_on unknown service {dep}")
        fleet = str(s.get("image", "")).startswith("${FLEET_IMAGE")
        if fleet:
            env = s.get("environment") or {}
            for key in (env if isinstance(env, dict) else [e.split("=")[0] for e in env]):
                if not env_ok(key): fail(f"{where}: environment {key} is not in docs/configuration.md")
            if not s.get("env_file"): fail(f"{where}: no env_file")
        if fleet and name != "migrate":
            if not s.get("healthcheck"): fail(f"{where}: no healthcheck")
            g = seconds(s.get("stop_grace_period"))
            if g is None or g < min_stop: fail(f"{where}: stop_grace_period {s.get('stop_grace_period')} < {min_stop}s")
            if s.get("stop_signal", "SIGTERM") != "SIGTERM": fail(f"{where}: stop_signal is not SIGTERM")
    for name in ("render-worker", "image-worker"):
        s = services.get(name, {})
        if not ((s.get("deploy") or {}).get("replicas") or s.get("scale")): fail(f"compose {name}: no deploy.replicas or scale")
        if not any(str(v).endswith(":/data/images") for v in s.get("volumes", [])): fail(f"compose {name}: /data/images is not a volume")

# ---- docker compose with a gateway (docker-compose.object-storage.yml, an override) ----------------
# Every fleet service it changes exists in docker-compose.yml and gets FLEET_STORAGE=s3://… with
# documented variables only; the gateway has a healthcheck and the bucket is made before the fleet starts.
override = (docs_by_file.get("deploy/docker-compose.object-storage.yml") or [None])[0]
if not override: fail("deploy/docker-compose.object-storage.yml: missing")
elif compose:
    where = "compose object storage"
    added, base = override.get("services", {}), compose.get("services", {})
    volumes = set(compose.get("volumes") or {}) | set(override.get("volumes") or {})
    if not (added.get("gateway") or {}).get("healthcheck"): fail(f"{where}: the gateway service has no healthcheck")
    for name in ("dispatcher", "render-worker", "image-worker"):
        s = added.get(name)
        if not s: fail(f"{where}: {name} is not given the bucket"); continue
        env = s.get("environment") or {}
        if not str(env.get("FLEET_STORAGE", "")).startswith("s3://"): fail(f"{where} {name}: no FLEET_STORAGE=s3://…")
        for key in env:
            if not env_ok(key): fail(f"{where} {name}: environment {key} is not in docs/configuration.md")
        if "bucket" not in (s.get("depends_on") or {}): fail(f"{where} {name}: does not wait for the bucket")
    for name, s in added.items():
        if name not in base and not s.get("image"): fail(f"{where}: service {name} is in neither file with an image")
        for dep in (s.get("depends_on") or {}):
            if dep not in base and dep not in added: fail(f"{where} {name}: depends_on unknown service {dep}")
        for v in s.get("volumes", []):
            src = v.split(":")[0] if isinstance(v, str) else v.get("source")
            if src and not src.startswith((".", "/", "$")) and src not in volumes: fail(f"{where} {name}: volume {src} is not defined")

# ---- env.example --------------------------------------------------------------------------------
example = set(re.findall(r"^#?([A-Z][A-Z0-9_]+)=", open(p("deploy/env.example")).read(), re.M))
for name in sorted(documented - example): fail(f"deploy/env.example: documented variable {name} is missing")
for name in sorted(example - documented - COMPOSE_ONLY): fail(f"deploy/env.example: {name} is not in docs/configuration.md")

# ---- Dockerfile ---------------------------------------------------------------------------------
df = open(p("deploy/Dockerfile")).read()
froms = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", df, re.M | re.I)
if len(froms) < 2: fail(f"Dockerfile: {len(froms)} stages (want a build and a runtime stage)")
else:
    if not re.fullmatch(r"swift:6\.3[\w.-]*-bookworm", froms[0][0]): fail(f"Dockerfile: build stage FROM {froms[0][0]} (want swift:6.3…-bookworm)")
    if froms[-1][0] != "debian:bookworm-slim": fail(f"Dockerfile: runtime stage FROM {froms[-1][0]} (want debian:bookworm-slim)")
    build_part, runtime_part = re.split(r"^FROM\s+" + re.escape(froms[-1][0]), df, flags=re.M | re.I)[:2]
    for pkg in ("libpq-dev", "libvips-dev", "libcurl4-openssl-dev", "libsodium-dev"):
        if pkg not in build_part: fail(f"Dockerfile: build stage does not install {pkg}")
    if "--static-swift-stdlib" not in build_part or "-c release" not in build_part: fail("Dockerfile: no `swift build -c release --static-swift-stdlib`")
    for pkg in ("libpq5", "libvips42", "libcurl4", "libsodium23", "ca-certificates", "tzdata"):
        if not re.search(r"\b" + re.escape(pkg) + r"\b", runtime_part): fail(f"Dockerfile: runtime stage does not install {pkg}")
    if re.search(r"\b\S+-dev\b", re.sub(r"#.*", "", runtime_part)): fail("Dockerfile: runtime stage installs -dev packages")
    users = re.findall(r"^USER\s+(\S+)", runtime_part, re.M)
    if not users or users[-1] in ("root", "0"): fail("Dockerfile: runtime stage does not switch to a non-root USER")
    if "/data/images" not in " ".join(re.findall(r"^VOLUME\s+(.*)", runtime_part, re.M)): fail("Dockerfile: no VOLUME /data/images")
    for exe in ("dispatcher", "render-worker", "image-worker"):
        if exe not in build_part: fail(f"Dockerfile: executable {exe} is not built/copied")
ignores = [f for f in (p(".dockerignore"), p("deploy/.dockerignore"), p("deploy/Dockerfile.dockerignore")) if os.path.exists(f)]
if not ignores: fail("no .dockerignore")
else:
    lines = {l.strip().strip("/") for f in ignores for l in open(f)}
    for want in (".build", ".data", ".bench"):
        if want not in lines: fail(f".dockerignore does not exclude {want}")

# ---- systemd -------------------------------------------------------------------------------------
units = sorted(glob.glob(p("deploy/systemd/*.service")))
if not units: fail("deploy/systemd: no units")
for unit in units:
    text = open(unit).read()
    rel = os.path.relpath(unit, root)
    m = re.search(r"^TimeoutStopSec=(\d+)s?$", text, re.M)
    if not m or int(m.group(1)) < min_stop: fail(f"{rel}: TimeoutStopSec {m and m.group(1)} < {min_stop}")
    for key in ("EnvironmentFile=", "KillSignal=SIGTERM", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem="):
        if key not in text: fail(f"{rel}: no {key}")
if units_tmp:
    to_verify = []
    for unit in units:
        base = os.path.basename(unit)
        name = base.replace("@.service", "@render-worker-1.service")   # a template needs an instance
        with open(os.path.join(units_tmp, name), "w") as out:
            out.write(open(unit).read().replace("/usr/local/bin/", units_tmp + "/bin/"))
        to_verify.append(os.path.join(units_tmp, name))
    r = subprocess.run(["systemd-analyze", "verify", *to_verify], capture_output=True, text=True)
    noise = [l for l in (r.stdout + r.stderr).splitlines() if l.strip()]
    if r.returncode != 0 or noise:
        fail("systemd-analyze verify:\n    " + "\n    ".join(noise or [f"exit {r.returncode}"]))
else:
    print("check-deploy: systemd-analyze not found; unit verification skipped", file=sys.stderr)

if errors:
    print(f"check-deploy: FAIL ({len(errors)} problem{'s' if len(errors) > 1 else ''}):", file=sys.stderr)
    for e in errors: print("  - " + e, file=sys.stderr)
    sys.exit(1)
print(f"check-deploy: OK ({len(docs_by_file)} YAML files, {len(deployments)} Deployments, "
      f"{len(scaled)} ScaledObjects, {len(compose.get('services', {}))} compose services, {len(units)} systemd units, "
      f"{len(documented)} documented variables; drain {grace} s)")
EOF
