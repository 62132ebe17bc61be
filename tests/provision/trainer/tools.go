//go:build tools

// Package tools pins the Trainer v2 controller the end-to-end tier runs.
package tools

import _ "github.com/kubeflow/trainer/v2/cmd/trainer-controller-manager"
