//go:build tools

// Package tools pins the prometheus-adapter command so that `go mod tidy`
// keeps its dependencies in go.mod/go.sum. The module proxy refuses the
// version list of sigs.k8s.io/prometheus-adapter, so `go install ...@v0.12.0`
// fails; building from this module with an exact require works.
package tools

import (
	_ "sigs.k8s.io/prometheus-adapter/cmd/adapter"
)
