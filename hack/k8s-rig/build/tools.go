//go:build tools

// Package tools pins the Kubernetes commands that build.sh builds, so that
// `go mod tidy` keeps their dependencies in go.mod/go.sum. It is never
// compiled (main packages cannot be imported); build.sh names the command
// packages directly:
//
//	go build -o BIN/ ./etcd k8s.io/kubernetes/cmd/kube-apiserver ...
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
