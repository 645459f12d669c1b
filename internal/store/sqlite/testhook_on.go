//go:build historyd_testhook

package sqlite

import (
	"sync/atomic"

	sqlite3 "modernc.org/sqlite/lib"
)

// This file exists only in binaries built with the historyd_testhook build tag (the end-to-end
// tests build one; `make build` and releases never do): it lets the test-hook service
// (internal/server/testhook_on.go) fail commits as an I/O error would (issue 15: "an I/O error on a
// write (UNAVAILABLE; the branch as it was)").

// injectedFaults is how many of the next commits, of every store in the process, fail.
var injectedFaults atomic.Int64

// FailNextCommits makes the next n commits fail with SQLITE_IOERR_WRITE.
func FailNextCommits(n int) { injectedFaults.Add(int64(n)) }

// injectedIOError is SQLite's I/O error on a write, as the test hook makes it.
type injectedIOError struct{}

func (injectedIOError) Error() string { return "disk I/O error (injected by the test hook)" }
func (injectedIOError) Code() int     { return sqlite3.SQLITE_IOERR_WRITE }

// commitFault fails a commit while injected faults remain.
func commitFault() func() error {
	return func() error {
		for {
			n := injectedFaults.Load()
			if n <= 0 {
				return nil
			}
			if injectedFaults.CompareAndSwap(n, n-1) {
				return injectedIOError{}
			}
		}
	}
}
