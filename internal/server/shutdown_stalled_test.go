package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// TestShutdownWithStalledWatcher: a watcher that stopped reading does not hold shutdown for the
// grace period (issue 5: "Server shutdown ends streams cleanly so GracefulStop completes inside the
// grace period"). EndStreams ends its handler at once, but its queued frames and trailers wait on
// HTTP/2 flow control, which GracefulStop would wait out; once every handler has returned, Shutdown
// gives clients the flush window and then stops. The grace period here is an hour and the test's
// context ten seconds: only the flush-window path ends Shutdown in between, and says so in the log.
func TestShutdownWithStalledWatcher(t *testing.T) {
	st := store.NewMemory()
	hs := NewHistoryServer(st, nil, WithSendTimeout(time.Hour))
	hs.encodeFrames = true
	ts := newTestServer(t, func(gs *grpc.Server) { historyv1.RegisterHistoryServiceServer(gs, hs) }, WithGracePeriod(time.Hour))
	ts.OnShutdown(hs.EndStreams)
	f := &historyFixture{st: st, c: historyv1.NewHistoryServiceClient(ts.conn), ts: ts}
	b := f.create(t, &historyv1.CreateBranchRequest{})

	// A watcher on a connection with a small window that reads its start frame and nothing more.
	stalled := historyv1.NewHistoryServiceClient(ts.dial(t, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10)))
	s, _ := openWatch(testContext(t), t, stalled, &historyv1.WatchBranchRequest{BranchId: b})
	for range 20 {
		f.instruction(t, b, strings.Repeat("x", 16<<10))
	}
	// The writes are committed; the frames are queued behind the stalled client's window.

	err := ts.Shutdown(testContext(t))
	if !errors.Is(err, ErrForcedStop) {
		t.Errorf("Shutdown = %v, want ErrForcedStop: the stalled client never read its frames", err)
	}
	if n := ts.logs.FilterMessageSnippet("clients have not read their last frames").Len(); n != 1 {
		t.Errorf("%d flush-window lines, want 1; log: %v", n, ts.logs.All())
	}
	if n := ts.logs.FilterMessageSnippet("shutdown context ended").Len(); n != 0 {
		t.Error("Shutdown waited until its context ended")
	}
	for { // what was queued, then the cut
		if _, err := s.Recv(); err != nil {
			break
		}
	}
}
