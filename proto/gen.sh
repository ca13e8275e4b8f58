#!/usr/bin/env bash
# Regenerates the Go code for proto/*.proto. Needs protoc (Debian:
# protobuf-compiler) and the Go plugins pinned in go.mod's toolchain:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.11
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
set -euo pipefail
cd "$(dirname "$0")"
export PATH="$(go env GOPATH)/bin:$PATH"
for svc in master pserver agent; do
  mkdir -p "${svc}pb"
  protoc --go_out="${svc}pb" --go_opt=paths=source_relative \
    --go-grpc_out="${svc}pb" --go-grpc_opt=paths=source_relative \
    "${svc}.proto"
done
# The Python SDK's messages (python/elasticdl/_proto): protoc alone, no
# gRPC plugin (the SDK names its methods itself); imports made relative so
# that the package needs no sys.path entry.
py=../python/elasticdl/_proto
for svc in master pserver; do
  protoc --python_out="$py" "${svc}.proto"
done
sed -i 's/^import pserver_pb2 as/from . import pserver_pb2 as/' "$py/master_pb2.py"
