package sqlite

import (
	"testing"

	"github.com/historyd/historyd/internal/store/storetest"
)

// Review of the read paths, fault 1: the read stops at the caller's budget
// (storetest.ReadStopsAtTheCallersBudget has the rule).
func TestReadStopsAtTheCallersBudget(t *testing.T) {
	storetest.ReadStopsAtTheCallersBudget(t, newTestStore(t, storetest.Options{}))
}
