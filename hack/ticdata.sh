#!/usr/bin/env bash
# Fetches ticdata (CoIL Challenge 2000; kernlab's data set, Debian package
# r-cran-kernlab) and converts it to the CSV schema elasticdl reads
# (hack/ticdata.py). Only the package's .deb is downloaded and unpacked
# (apt-get download): R itself is not installed; python3-rdata reads the
# .rda. Prints the directory, which holds train.csv, test.csv, schema and
# columns.tsv; does nothing when they are there.
#   hack/ticdata.sh [DIR]     # default ~/.cache/elasticdl-data/ticdata
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-${XDG_CACHE_HOME:-$HOME/.cache}/elasticdl-data/ticdata}"
if [ -s "$out/train.csv" ] && [ -s "$out/test.csv" ] && [ -s "$out/schema" ]; then
  echo "$out"
  exit 0
fi
py=/usr/bin/python3 # Debian's, which has python3-rdata (not a pyenv or venv one)
if ! "$py" -c 'import rdata' 2>/dev/null; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    echo "installing python3-rdata ..." >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-rdata >&2
  else
    echo "missing Debian package python3-rdata: sudo apt-get install --no-install-recommends python3-rdata" >&2
    exit 1
  fi
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# apt-get download writes to the working directory; _apt cannot write a
# mktemp directory, so it warns and downloads as the caller.
download() { (cd "$tmp" && apt-get download -qq r-cran-kernlab 2>&1 | grep -v 'unsandboxed' >&2 || true); }
download
deb=("$tmp"/r-cran-kernlab_*.deb)
if [ ! -f "${deb[0]}" ] && [ "$(id -u)" -eq 0 ]; then
  apt-get update -qq >&2 # a fresh machine's package lists may be empty
  download
  deb=("$tmp"/r-cran-kernlab_*.deb)
fi
[ -f "${deb[0]}" ] || { echo "apt-get download r-cran-kernlab failed (run apt-get update first?)" >&2; exit 1; }
dpkg-deb -x "${deb[0]}" "$tmp/x"
rda="$(find "$tmp/x" -name ticdata.rda | head -1)"
[ -n "$rda" ] || { echo "${deb[0]} has no ticdata.rda" >&2; exit 1; }
"$py" "$here/ticdata.py" "$rda" "$out" >&2
echo "$out"
