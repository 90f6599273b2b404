#!/usr/bin/env bash
# Installs the Debian packages the fleet builds and runs with, when any is missing, and
# `prometheus` for its promtool (scripts/check-signals.sh checks the alert rules with it).
# node-typescript: tsc checks clients/node/index.d.ts (scripts/test.sh, the Node step).
# chromium and chromium-driver: the console's browser test (scripts/console-browser-test.py).
# pgbouncer: the tests through a transaction pooler (scripts/pgbouncer.sh starts its own; the
# package's system-wide server, on port 6432, is stopped and disabled as prometheus' is).
# ceph-mon, ceph-osd, radosgw, ceph-common: the S3 gateway of the object storage tests
# (scripts/s3.sh starts its own one-node cluster; the packages start no daemon).
set -euo pipefail
packages=(libpq-dev libvips-dev libvips-tools libcurl4-openssl-dev libsodium-dev postgresql python3-venv chromium chromium-driver pgbouncer
  node-typescript ceph-mon ceph-osd radosgw ceph-common)
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
missing=()
for package in "${packages[@]}"; do
  installed "$package" || missing+=("$package")
done
installed prometheus || missing_prometheus=1
[ ${#missing[@]} -eq 0 ] && [ -z "${missing_prometheus:-}" ] && exit 0
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
# Stops and disables the system-wide server a package just installed started on a systemd or
# sysvinit machine. The package was not installed before, so whatever runs under its name was
# started here.
stop_service() {
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    $sudo systemctl disable --now "$1.service" >/dev/null 2>&1 || true
  elif [ -x "/etc/init.d/$1" ]; then
    $sudo "/etc/init.d/$1" stop >/dev/null 2>&1 || true
    command -v update-rc.d >/dev/null 2>&1 && { $sudo update-rc.d "$1" disable >/dev/null 2>&1 || true; }
  fi
}
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  if [[ " ${missing[*]} " == *" pgbouncer "* ]]; then stop_service pgbouncer; fi
fi
if [ -n "${missing_prometheus:-}" ]; then
  # Only promtool is wanted. Without recommends (no node exporter); its server would listen on
  # 9090, the dispatcher's default HTTP port.
  echo "installing: prometheus (for promtool; its server is stopped and disabled)" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  stop_service prometheus
fi
