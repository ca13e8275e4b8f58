#!/usr/bin/env bash
# Installs what building, running and testing elasticdl needs on a Debian
# machine, when it is missing: Fashion-MNIST (dataset-fashion-mnist) and
# OpenBLAS (libopenblas-dev, for `-tags openblas`). Without root or apt it
# says what to install instead of failing halfway.
set -euo pipefail
need=()
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || need+=(dataset-fashion-mnist)
[ -e /usr/include/x86_64-linux-gnu/cblas.h ] || [ -e /usr/include/cblas.h ] || dpkg -s libopenblas-dev >/dev/null 2>&1 || need+=(libopenblas-dev)
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
  echo "installing ${need[*]} ..." >&2
  apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
else
  echo "missing Debian packages: ${need[*]}" >&2
  echo "install them with: sudo apt-get update && sudo apt-get install ${need[*]}" >&2
  exit 1
fi
