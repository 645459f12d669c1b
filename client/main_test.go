package client_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests: the client's, the proxy's and the
// in-process server's (docs/development.md#style-tests "Tests use goleak").
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
