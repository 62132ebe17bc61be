//go:build tools

// Package tools records the cert-manager commands this module builds so that
// `go mod tidy` keeps every dependency they need in go.sum.
package tools

import (
	_ "github.com/cert-manager/cert-manager/cmd/cainjector"
	_ "github.com/cert-manager/cert-manager/cmd/controller"
)
