//go:build tools

// Package tools records the Kubernetes commands this module builds so that
// `go mod tidy` keeps every dependency they need in go.sum.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
)
