//go:build unix

package server

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user and system) the process has used: benchmarks report CPU per
// operation, which, unlike wall time, does not move when other processes share the cores.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
