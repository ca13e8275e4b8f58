#!/usr/bin/env bash
# Prints the build tags for the fastest BLAS available here: "openblas" when
# OpenBLAS's development files are installed, nothing otherwise (pure Go).
if [ -e /usr/lib/x86_64-linux-gnu/libopenblas.so ] || [ -e /usr/lib/libopenblas.so ] || \
   ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so '; then
  echo openblas
fi
