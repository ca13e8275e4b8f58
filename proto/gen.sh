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
