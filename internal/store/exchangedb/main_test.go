package exchangedb_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The Engine starts goroutines (dispatcher, pruner, collector), and so do the stores under it:
// every test must stop them (docs/development.md#style-tests).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
