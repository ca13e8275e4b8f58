#!/usr/bin/env bash
# An S3 server for the object-storage tests and for people: SeaweedFS's
# `weed server -s3` (master, volume, filer and S3 gateway in one process,
# built by hack/s3/build.sh and cached), as a plain process in a directory
# of its own, on free ports of 127.0.0.1, with one identity whose keys are
# made once and kept, and a bucket `elasticdl`.
#   hack/s3.sh up   [DIR]  start it (or find it running), print the exports
#   hack/s3.sh env  [DIR]  print the exports of the running server
#   hack/s3.sh down [DIR]  stop it (the data stays: the next up is quick)
# Prints, for eval (the standard AWS variables, which the job reads too):
#   export AWS_ENDPOINT_URL=http://127.0.0.1:PORT AWS_REGION=us-east-1
#   export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=...
#   export ELASTICDL_S3_BUCKET=elasticdl
# DIR defaults to ~/.cache/elasticdl-s3.
set -euo pipefail
cmd="${1:-}"
case "$cmd" in up | down | env) ;; *) echo "usage: $0 up|down|env [DIR]" >&2; exit 2 ;; esac
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir="${2:-${XDG_CACHE_HOME:-$HOME/.cache}/elasticdl-s3}"
mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
say() { echo "s3.sh: $*" >&2; }
die() { say "$*"; exit 1; }
bucket=elasticdl
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

keys() {
  if [ ! -s "$dir/keys" ]; then
    (umask 077 && echo "elasticdl$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n') $(od -An -N20 -tx1 /dev/urandom | tr -d ' \n')" >"$dir/keys")
  fi
  cat "$dir/keys"
}
access() { keys | cut -d' ' -f1; }
secret() { keys | cut -d' ' -f2; }
endpoint() { echo "http://127.0.0.1:$(cat "$dir/port")"; }
# s3 METHOD PATH: one signed request (curl's SigV4), its HTTP status.
s3() {
  curl -s -o /dev/null -w '%{http_code}' -X "$1" --aws-sigv4 "aws:amz:us-east-1:s3" \
    --user "$(access):$(secret)" "$(endpoint)$2"
}
running() { [ -s "$dir/port" ] && [ -s "$dir/pid" ] && kill -0 "$(cat "$dir/pid")" 2>/dev/null && [ "$(s3 GET /)" = 200 ]; }

up() {
  running && return 0
  local bin; bin="$("$here/s3/build.sh" | tail -n1)"
  cat >"$dir/s3.json" <<JSON
{"identities": [{"name": "elasticdl", "credentials": [{"accessKey": "$(access)", "secretKey": "$(secret)"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
JSON
  chmod 600 "$dir/s3.json"
  mkdir -p "$dir/data"
  local try
  for try in 1 2 3; do # another program may take a free port first
    local p=() i
    for i in 1 2 3 4 5 6 7 8; do p+=("$(free_port)"); done
    echo "${p[0]}" >"$dir/port"
    # Its own session, so that it outlives this script.
    setsid "$bin/weed" -logdir="$dir" server -dir="$dir/data" -ip=127.0.0.1 -ip.bind=127.0.0.1 \
      -master.port="${p[1]}" -master.port.grpc="${p[2]}" -master.volumeSizeLimitMB=64 \
      -volume.port="${p[3]}" -volume.port.grpc="${p[4]}" -volume.max=100 \
      -filer.port="${p[5]}" -filer.port.grpc="${p[6]}" \
      -s3 -s3.port="${p[0]}" -s3.port.grpc="${p[7]}" -s3.config="$dir/s3.json" -s3.port.iceberg=0 -s3.port.lance=0 \
      </dev/null >"$dir/log" 2>&1 9>&- &
    echo $! >"$dir/pid"
    local deadline=$((SECONDS + 60))
    while ! running; do
      kill -0 "$(cat "$dir/pid")" 2>/dev/null && [ $SECONDS -lt $deadline ] || break
      sleep 0.2
    done
    running && break
    kill "$(cat "$dir/pid")" 2>/dev/null || true
    [ $try -lt 3 ] || { tail -20 "$dir/log" >&2; die "weed did not start (log: $dir/log)"; }
  done
  local code; code="$(s3 PUT "/$bucket")"
  case "$code" in 200 | 409) ;; *) die "creating bucket $bucket: HTTP $code (log: $dir/log)" ;; esac
}

down() {
  [ -s "$dir/pid" ] || return 0
  local pid; pid="$(cat "$dir/pid")"
  kill "$pid" 2>/dev/null || return 0
  local deadline=$((SECONDS + 30))
  while kill -0 "$pid" 2>/dev/null; do
    [ $SECONDS -lt $deadline ] || { kill -9 "$pid" 2>/dev/null; break; }
    sleep 0.1
  done
}

exports() {
  running || die "no S3 server running in $dir: hack/s3.sh up"
  echo "export AWS_ENDPOINT_URL=$(endpoint) AWS_REGION=us-east-1"
  echo "export AWS_ACCESS_KEY_ID=$(access) AWS_SECRET_ACCESS_KEY=$(secret)"
  echo "export ELASTICDL_S3_BUCKET=$bucket"
}

exec 9>"$dir/lock"
flock 9
case "$cmd" in
  up) up; exports ;;
  env) exports ;;
  down) down; say "stopped (data kept in $dir)" ;;
esac
