#!/usr/bin/env bash
# Installs what building, running and testing elasticdl needs on a Debian
# machine, when it is missing: make, gcc (cgo: -race, OpenBLAS),
# Fashion-MNIST (dataset-fashion-mnist), OpenBLAS (libopenblas-dev, for
# `-tags openblas`), and for the Kubernetes test rig (hack/k8s-rig,
# test/e2e) openssl (its PKI), iproute2 (ss), procps (ps, pgrep) and
# util-linux (setsid, flock); with --pytorch python3-torch,
# python3-grpcio, python3-protobuf and protoc (PyTorch workers),
# chromium (the web pages' tests), python3-onnx, nodejs and npm, and
# onnxruntime-node (hack/onnxruntime.sh: the ONNX export checks); and
# ticdata, converted by hack/ticdata.sh (python3-rdata). Without root or apt it says what to install instead of
# failing halfway.
set -euo pipefail
need=()
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || need+=(dataset-fashion-mnist)
[ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ] || dpkg -s libopenblas-dev >/dev/null 2>&1 || need+=(libopenblas-dev)
command -v make >/dev/null || need+=(make)
command -v gcc >/dev/null || need+=(gcc)
command -v openssl >/dev/null || need+=(openssl)
command -v ss >/dev/null || need+=(iproute2)
command -v ps >/dev/null && command -v pgrep >/dev/null || need+=(procps)
command -v setsid >/dev/null && command -v flock >/dev/null || need+=(util-linux)
command -v sha256sum >/dev/null || need+=(coreutils)
command -v curl >/dev/null || need+=(curl) # hack/s3.sh signs its requests with curl --aws-sigv4
# With --pytorch (the test suite: hack/test.sh, hack/e2e.sh), what PyTorch
# workers need (python/elasticdl, examples/pytorch, the TestPyTorch*
# tests): Debian's torch, grpcio and protobuf for /usr/bin/python3, and
# protoc, which checks that the SDK's generated messages are current.
# Without their recommends (compilers, dev headers: hundreds of MB).
bare=()
if [ "${1:-}" = "--pytorch" ]; then
  /usr/bin/python3 -c 'import torch, grpc, google.protobuf, numpy' 2>/dev/null || bare+=(python3-torch python3-grpcio python3-protobuf python3-numpy)
  command -v protoc >/dev/null || bare+=(protobuf-compiler)
  # The web pages' tests (internal/browsertest) run in Debian's headless
  # Chromium.
  [ -x /usr/lib/chromium/chromium ] || command -v chromium >/dev/null || bare+=(chromium)
  # The ONNX export checks: Debian's python3-onnx (1.12, opset <= 17) for
  # its checker, and node/npm for onnxruntime-node (hack/onnxruntime.sh,
  # below, caches it).
  /usr/bin/python3 -c 'import onnx' 2>/dev/null || bare+=(python3-onnx)
  command -v node >/dev/null || bare+=(nodejs)
  command -v npm >/dev/null || bare+=(npm)
fi
if [ $((${#need[@]} + ${#bare[@]})) -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "installing ${need[*]} ${bare[*]} ..." >&2
    apt-get update -qq >&2
    if [ ${#need[@]} -gt 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
    fi
    if [ ${#bare[@]} -gt 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${bare[@]}" >&2
    fi
  else
    echo "missing Debian packages: ${need[*]} ${bare[*]}" >&2
    echo "install them with: sudo apt-get update && sudo apt-get install ${need[*]} ${bare[*]}" >&2
    exit 1
  fi
fi
# ticdata (the CTR models' real data set: experiment 3, test/local),
# converted once into ~/.cache.
"$(dirname "$0")/ticdata.sh" >/dev/null
# onnxruntime-node for the ONNX export checks, cached in ~/.cache.
if [ "${1:-}" = "--pytorch" ]; then
  "$(dirname "$0")/onnxruntime.sh" >/dev/null
fi
