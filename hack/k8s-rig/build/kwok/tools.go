//go:build tools

// Package tools pins sigs.k8s.io/kwok v0.8.0's kwok command.
//
// kwok v0.8.0 needs k8s.io/* v0.36.1 (and k8s.io/cri-streaming, which does
// not exist at v0.35), while the control plane in ../ is pinned to v0.35.4 by
// replace directives, so kwok gets its own module with kwok's own dependency
// versions. build.sh runs: go build -o BIN/ sigs.k8s.io/kwok/cmd/kwok
package tools

import (
	_ "sigs.k8s.io/kwok/cmd/kwok"
)
