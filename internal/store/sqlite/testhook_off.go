//go:build !historyd_testhook

package sqlite

// commitFault is nil: commits fail only as SQLite fails them. The historyd_testhook build injects
// faults (testhook_on.go).
func commitFault() func() error { return nil }
