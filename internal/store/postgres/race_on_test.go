//go:build race

package postgres

// raceElsewhere: ScopesIsolated makes about 120,000 sequential writes,
// each a transaction on the server; under the race detector that takes
// many minutes. `make test` runs it without -race in a pass of its own
// (Makefile, test target), beside the sqlite engine's.
var raceElsewhere = map[string]string{
	"ScopesIsolated": "make test runs it without -race (go test -count=1 -timeout 15m -run 'TestConformance/ScopesIsolated$' ./internal/store/postgres/)",
}
