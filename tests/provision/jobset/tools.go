//go:build tools

// Package tools pins the JobSet controller the end-to-end tier runs.
package tools

import _ "sigs.k8s.io/jobset"
