//go:build tools

// Package tools records the binary this module builds, so that `go mod tidy` keeps it.
package tools

import _ "sigs.k8s.io/kueue/cmd/kueue"
