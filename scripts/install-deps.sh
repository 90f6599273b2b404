#!/usr/bin/env bash
# Installs the Debian packages the fleet builds and runs with, when any is missing, and
# `prometheus` for its promtool (scripts/check-signals.sh checks the alert rules with it).
# chromium and chromium-driver: the console's browser test (scripts/console-browser-test.py).
set -euo pipefail
packages=(libpq-dev libvips-dev libvips-tools libcurl4-openssl-dev libsodium-dev postgresql python3-venv chromium chromium-driver)
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
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
if [ -n "${missing_prometheus:-}" ]; then
  # Only promtool is wanted. Without recommends (no node exporter); the server the package
  # starts on a systemd or sysvinit machine is stopped and disabled at once: it would listen on
  # 9090, the dispatcher's default HTTP port. This package was not installed before, so
  # whatever runs under its name was started here.
  echo "installing: prometheus (for promtool; its server is stopped and disabled)" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends prometheus >/dev/null
  if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    $sudo systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  elif [ -x /etc/init.d/prometheus ]; then
    $sudo /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    command -v update-rc.d >/dev/null 2>&1 && { $sudo update-rc.d prometheus disable >/dev/null 2>&1 || true; }
  fi
fi
