//go:build e2e

package e2e

import (
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Helpers of issue 16's end-to-end tests: historyd replicas of the real binary on one PostgreSQL
// schema (pgtest.New: a fresh schema per test, dropped after; the test skips saying how when no
// PostgreSQL answers, and fails under HISTORYD_REQUIRE_POSTGRES=1).

// replicaConns is each replica's pool (--postgres-max-conns): every test's replicas share the
// machine's PostgreSQL, whose max_connections is 100, with the other engineers' and CI's tests.
const replicaConns = 4

// replicaArgs are the flags of a replica serving the database at url.
func replicaArgs(url string, extra ...string) []string {
	return append([]string{"--store", "postgres", "--postgres-url", url, "--postgres-max-conns", strconv.Itoa(replicaConns)}, extra...)
}

// startReplicas starts n replicas on url all at once (issue 16: "replicas that start together
// migrate safely"), each on a port of its own, and returns once every one is SERVING.
func startReplicas(t *testing.T, url string, n int) []*proc {
	t.Helper()
	ps := make([]*proc, n)
	for i := range ps {
		ps[i] = startReplicaProcess(t, url)
	}
	for _, p := range ps {
		awaitServing(t, p)
	}
	return ps
}

// startReplicaProcess starts one replica on url (extra flags after) and returns at once.
func startReplicaProcess(t *testing.T, url string, extra ...string) *proc {
	t.Helper()
	return startProcess(t, append([]string{"--listen", "127.0.0.1:0", "--log-format", "json"}, replicaArgs(url, extra...)...)...)
}

// stopReplicas stops each replica with SIGTERM, which must end it with exit status 0.
func stopReplicas(t *testing.T, ps ...*proc) {
	t.Helper()
	for _, p := range ps {
		if code, _ := stop(t, p, syscall.SIGTERM, startTimeout); code != 0 {
			t.Errorf("a replica exited %d after SIGTERM; the end of its log:\n%s", code, logTail(p))
		}
	}
}

// logTail is the last lines of p's log that are not a call's access line ("finished call": a
// replica under load writes thousands), for a failure's message.
func logTail(p *proc) string {
	var kept []string
	for _, l := range p.stderr.Lines() {
		if !strings.Contains(l, `"msg":"finished call"`) {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept[max(0, len(kept)-40):], "\n")
}

// historyClient is a HistoryService client of p, closed when t ends.
func historyClient(t *testing.T, p *proc) historyv1.HistoryServiceClient {
	t.Helper()
	return historyv1.NewHistoryServiceClient(dial(t, p))
}

// noLeaks checks, once t and all its cleanups are done (the processes reaped, the connections
// closed, the proxy's relays ended), that no goroutine t started is left. Call it first: cleanups
// run last-registered first.
func noLeaks(t *testing.T) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
}

// isStorageUnavailable reports whether err is UNAVAILABLE with reason STORAGE_UNAVAILABLE: a call
// made while the database does not answer (issue 16: "calls fail UNAVAILABLE (retryable)").
func isStorageUnavailable(err error) bool {
	return status.Code(err) == codes.Unavailable &&
		reasonOf(err) == historyv1.ErrorReason_ERROR_REASON_STORAGE_UNAVAILABLE.String()
}
