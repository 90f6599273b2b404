#!/usr/bin/env bash
# A one-node Ceph cluster on loopback with its RADOS gateway: an S3-compatible object store in
# a folder of the project (default .data/s3), for the object storage tests (docs/images.md,
# "Object storage"). Debian's ceph-mon, ceph-osd, radosgw and ceph-common.
#
# usage: scripts/s3.sh start|stop|status|url|dir [--dir DIR] [--port PORT] [--listen ADDRS]
#   start    create the cluster if needed (one monitor, one OSD, one gateway), start what is not
#            running, make the S3 user and the bucket; prints what `url` prints
#   stop     stop the gateway, the OSD and the monitor this folder's pid files name, and wait
#            until each has exited
#   status   "running: <endpoint>" (exit 0) or "stopped" (exit 3)
#   url      `export` lines for a shell: S3_ENDPOINT, S3_REGION, S3_ACCESS_KEY_ID,
#            S3_SECRET_ACCESS_KEY, S3_BUCKET
#   dir      print the cluster's folder
#   --port   the gateway's port (default 17480); the monitor listens on the next one
#   --listen more addresses (comma-separated) the gateway listens on, on the same port, beside
#            127.0.0.1: e.g. the host ends of network namespaces' links (scripts/chaos.sh). Read
#            when the cluster is made: `stop` first to change them
# A throwaway store: objects live in the OSD's memory (memstore) and are gone after `stop`;
# one replica, no cluster authentication (cephx off), everything bound to 127.0.0.1 (the
# gateway also to the --listen addresses). The S3 keys are fixed test keys. Run as root the
# daemons stay root: unlike PostgreSQL, Ceph does not refuse it, so the folder may be anywhere
# (a clone in root's 0700 home included).
# Each daemon runs in the foreground (-f) in a session of its own, its output in the folder's
# log/<name>.out, and its pid (the script's own $!, not a pid file the daemon writes after
# forking itself away) in run/<name>.pid: `stop` ends exactly the daemons `start` started.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
command=${1:-}
shift || true
dir="$root/.data/s3"
port=17480
listen=""
while [ $# -gt 0 ]; do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --listen) listen=$2; shift 2 ;;
    *) echo "s3.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
dir=$(realpath -m "$dir")
mon_port=$((port + 1))
conf="$dir/ceph.conf"
region=us-east-1
bucket=fleet-images
access_key=FLEETTESTACCESSKEY01
secret_key=fleet-test-secret-key-not-for-production-use
endpoint="http://127.0.0.1:$port"

for tool in ceph-mon ceph-osd radosgw radosgw-admin ceph monmaptool ceph-authtool; do
  command -v "$tool" >/dev/null || { echo "s3.sh: $tool not found; apt-get install ceph-mon ceph-osd radosgw ceph-common" >&2; exit 1; }
done

# Runs a Ceph command line tool against this cluster only (never /etc/ceph).
ceph_cli() { ceph --conf "$conf" --connect-timeout 10 "$@"; }

# Whether the daemon whose pid file is $1 is running: that pid, and a process of this folder's
# cluster (a pid the kernel gave to another process since is not ours to signal).
alive() {
  [ -f "$1" ] || return 1
  local pid
  pid=$(cat "$1")
  kill -0 "$pid" 2>/dev/null && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "--conf $conf "
}

# Starts the daemon named $1 (mon.a, osd.0, client.rgw), the command line after it, in the
# foreground of a session of its own (no terminal's hangup reaches it), and records its pid.
launch() {
  local name=$1
  shift
  setsid "$@" -f </dev/null >>"$dir/log/$name.out" 2>&1 &
  echo $! >"$dir/run/$name.pid"
}

# Polls `$@` every 0.1 s until it succeeds; after $1 seconds says what did not happen.
wait_for() {
  local seconds=$1 what=$2; shift 2
  for _ in $(seq 1 $((seconds * 10))); do
    if "$@" >/dev/null 2>&1; then return; fi
    sleep 0.1
  done
  echo "s3.sh: $what after $seconds s (logs in $dir/log)" >&2
  exit 1
}

# beast's endpoint options: loopback, and each --listen address, all on the gateway's port.
frontend_endpoints() {
  local address endpoints="endpoint=127.0.0.1:$port"
  for address in ${listen//,/ }; do endpoints+=" endpoint=$address:$port"; done
  echo "$endpoints"
}

write_conf() {
  cat >"$conf" <<CONF
[global]
fsid = $(cat "$dir/fsid")
mon host = [v2:127.0.0.1:$mon_port]
public addr = 127.0.0.1
ms bind msgr1 = false
# radosgw waits 300 s for the monitor without it: its default asks for a mode the monitor
# does not offer once cephx is off.
ms mon client mode = crc secure
auth cluster required = none
auth service required = none
auth client required = none
run dir = $dir/run
admin socket = $dir/run/\$cluster-\$name.asok
# The daemons' own pid files, apart from the script's (run/<name>.pid): the script's alone count.
pid file = $dir/run/\$name.daemon.pid
log file = $dir/log/\$name.log
# The monitor writes the cluster log under /var/log/ceph unless told otherwise.
mon cluster log file = $dir/log/cluster.log
mon data = $dir/mon.\$id
osd data = $dir/osd.\$id
keyring = $dir/keyring
# One node, one copy, in memory.
osd objectstore = memstore
memstore device bytes = 1073741824
mon allow pool size one = true
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon warn on pool no redundancy = false
mon allow pool delete = true

[client.rgw]
rgw frontends = beast $(frontend_endpoints)
rgw dns name = 127.0.0.1
CONF
}

create() {
  rm -rf "$dir"
  mkdir -p "$dir/run" "$dir/log"
  chmod 700 "$dir"
  cat /proc/sys/kernel/random/uuid >"$dir/fsid"
  write_conf
  ceph-authtool --create-keyring "$dir/keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
  monmaptool --create --fsid "$(cat "$dir/fsid")" --addv a "[v2:127.0.0.1:$mon_port]" "$dir/monmap" >/dev/null
  ceph-mon --conf "$conf" --mkfs -i a --monmap "$dir/monmap" >"$dir/log/mkfs-mon.log" 2>&1 \
    || { cat "$dir/log/mkfs-mon.log" >&2; exit 1; }
}

start_monitor() {
  alive "$dir/run/mon.a.pid" || launch mon.a ceph-mon --conf "$conf" -i a
  wait_for 30 "the monitor does not answer" ceph_cli mon stat
}

start_osd() {
  if [ ! -f "$dir/osd.0/whoami" ]; then
    local uuid
    uuid=$(cat /proc/sys/kernel/random/uuid)
    mkdir -p "$dir/osd.0"
    ceph_cli osd new "$uuid" >/dev/null
    ceph-osd --conf "$conf" -i 0 --mkfs --osd-uuid "$uuid" >"$dir/log/mkfs-osd.log" 2>&1 \
      || { cat "$dir/log/mkfs-osd.log" >&2; exit 1; }
  fi
  # memstore keeps nothing across a restart: an OSD that stopped comes back empty, so the
  # whole cluster is made again instead (start calls create when the OSD is not running).
  alive "$dir/run/osd.0.pid" || launch osd.0 ceph-osd --conf "$conf" -i 0
  wait_for 60 "the OSD is not up" osd_up
}

osd_up() { ceph_cli osd dump | grep -q '^osd.0 up'; }

start_gateway() {
  alive "$dir/run/client.rgw.pid" || launch client.rgw radosgw --conf "$conf" -n client.rgw
  wait_for 120 "the gateway does not answer on $endpoint" curl -sf -o /dev/null "$endpoint/"
  if ! radosgw-admin --conf "$conf" user info --uid fleet >/dev/null 2>&1; then
    radosgw-admin --conf "$conf" user create --uid fleet --display-name "Wearbloom fleet tests" \
      --access-key "$access_key" --secret-key "$secret_key" >/dev/null
  fi
  # The bucket, made with curl's own SigV4 so that the script needs no S3 client. curl does not
  # send the payload's hash, which the gateway requires: it is the empty body's.
  local status
  status=$(curl -s -o "$dir/log/create-bucket.xml" -w '%{http_code}' -X PUT \
    -H "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" \
    --aws-sigv4 "aws:amz:$region:s3" --user "$access_key:$secret_key" "$endpoint/$bucket")
  case $status in
    200|409) ;;
    *) echo "s3.sh: creating bucket $bucket answered $status: $(cat "$dir/log/create-bucket.xml")" >&2; exit 1 ;;
  esac
}

start() {
  if ! alive "$dir/run/osd.0.pid"; then
    stop
    create
  fi
  start_monitor
  start_osd
  start_gateway
}

# Stops what the pid files of this folder name, gateway first, and waits for each to end (a
# daemon still there after 30 s is killed).
stop() {
  local name pid
  for name in client.rgw osd.0 mon.a; do
    if alive "$dir/run/$name.pid"; then
      pid=$(cat "$dir/run/$name.pid")
      kill "$pid"
      for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    fi
    rm -f "$dir/run/$name.pid" "$dir/run/$name.daemon.pid"
  done
}

url() {
  echo "export S3_ENDPOINT=$endpoint"
  echo "export S3_REGION=$region"
  echo "export S3_ACCESS_KEY_ID=$access_key"
  echo "export S3_SECRET_ACCESS_KEY=$secret_key"
  echo "export S3_BUCKET=$bucket"
}

case $command in
  start) start; url ;;
  stop) stop ;;
  status) if alive "$dir/run/client.rgw.pid" && curl -sf -o /dev/null "$endpoint/"; then echo "running: $endpoint"; else echo "stopped"; exit 3; fi ;;
  url) url ;;
  dir) echo "$dir" ;;
  *) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
