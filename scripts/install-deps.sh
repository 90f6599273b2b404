#!/usr/bin/env bash
# Installs the Debian packages the fleet builds and runs with, when any is missing.
set -euo pipefail
packages=(libpq-dev libvips-dev libvips-tools libcurl4-openssl-dev libsodium-dev postgresql python3-venv)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing: ${missing[*]}" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
