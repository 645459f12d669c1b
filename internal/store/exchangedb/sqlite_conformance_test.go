package exchangedb_test

import (
	"testing"

	"github.com/historyd/historyd/internal/exchange/exchangetest"
)

// TestSQLiteConformance runs the exchange conformance suite on the SQLite engine (issue 17
// Acceptance: "The exchange conformance suite passes on memory, sqlite and postgres"); the byte
// budget is the memory engine's only (common17).
func TestSQLiteConformance(t *testing.T) {
	exchangetest.Run(t, sqliteFactory, exchangetest.Capabilities{})
}
