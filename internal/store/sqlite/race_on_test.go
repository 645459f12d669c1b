//go:build race

package sqlite

// raceElsewhere: under the race detector, which instruments the whole of
// SQLite (modernc.org/sqlite is Go), ScopesIsolated's 130,000 sequential
// writes take 8 minutes; `make test` runs it without -race in a pass of
// its own (Makefile, test target).
var raceElsewhere = map[string]string{
	"ScopesIsolated": "make test runs it without -race (go test -run 'TestConformance/ScopesIsolated$' ./internal/store/sqlite/)",
}
