package sqlite

import (
	"testing"

	"go.uber.org/goleak"
)

// The writer is a goroutine: every test must stop it (docs/development.md#style-tests: goleak
// where goroutines start).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
