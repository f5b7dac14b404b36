// Package memlimit gives the Go runtime a soft memory limit below the container's.
//
// Without one, the heap grows to twice what is live before the collector runs (GOGC 100),
// and a controller whose live heap is above half its container's limit is OOM-killed at
// its next peak (a teardown's burst of requests, an informer's relist) though it would fit.
// With a soft limit the collector runs harder as the heap nears it, instead.
package memlimit

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
)

// EnvContainerLimit names the variable that carries the container's memory limit in bytes:
// the manifests set it from the downward API (resourceFieldRef limits.memory).
const EnvContainerLimit = "FAULTLINE_MEMORY_LIMIT"

// Share is the part of the container's limit given to the Go heap: the rest is for what
// the runtime does not count (stacks of cgo threads, plugin processes are apart anyway) and
// for the collector to catch up.
const Share = 0.9

// FromEnv sets the soft memory limit to Share of the container's limit, unless GOMEMLIMIT
// is set (an operator's choice wins) or no limit is known. It returns the limit set, or 0.
func FromEnv() (int64, error) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	v := os.Getenv(EnvContainerLimit)
	if v == "" {
		return 0, nil
	}
	limit, err := strconv.ParseInt(v, 10, 64)
	if err != nil || limit <= 0 {
		return 0, fmt.Errorf("%s=%q: want the container's memory limit in bytes (resourceFieldRef limits.memory)", EnvContainerLimit, v)
	}
	soft := int64(float64(limit) * Share)
	debug.SetMemoryLimit(soft)
	return soft, nil
}
