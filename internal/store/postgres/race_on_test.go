//go:build race

package postgres

// raceElsewhere: ScopesIsolated makes about 120,000 sequential writes,
// each a round trip to the server; under the race detector that takes
// many minutes. Run it without -race:
// go test -count=1 -timeout 15m -run 'TestConformance/ScopesIsolated$' ./internal/store/postgres/
var raceElsewhere = map[string]string{
	"ScopesIsolated": "run it without -race (go test -count=1 -timeout 15m -run 'TestConformance/ScopesIsolated$' ./internal/store/postgres/)",
}
