// Package cputime reads the CPU time this process has used, for the benchmarks: on the shared
// 2-core machines the wall-clock rate of a benchmark moves with the other processes' load, while
// the CPU an operation costs (user and system, every goroutine) moves little, so the benchmarks
// report it per operation (issues 14, 17 and 21).
package cputime
