package postgres

import (
	"testing"

	"go.uber.org/goleak"
)

// Every Store runs goroutines (connector, notifier, listener, puller,
// sweeper, janitor, prober): each test must stop them by Close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
