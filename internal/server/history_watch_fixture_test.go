package server

import (
	"context"
	"errors"
	"io"
	"testing"

	"google.golang.org/grpc"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// watchFixture is a HistoryService with WatchBranch stream options, its server-side stream ends
// reported on ended, and its streams ended at shutdown as RegisterHistory does.
type watchFixture struct {
	*historyFixture
	hs    *HistoryServer
	ended chan error // every WatchBranch handler's result, in the order they end
}

func newWatchFixture(t *testing.T, storeOpts []store.Option, opts ...StreamOption) *watchFixture {
	t.Helper()
	st := store.NewMemory(storeOpts...)
	hs := NewHistoryServer(st, nil, opts...)
	hs.encodeFrames = true // as RegisterHistory sets it: the test server is built by New
	ended := make(chan error, 4096)
	hs.streamEnded = func(err error) { ended <- err }
	ts := newTestServer(t, func(gs *grpc.Server) { historyv1.RegisterHistoryServiceServer(gs, hs) })
	ts.OnShutdown(hs.EndStreams)
	return &watchFixture{
		historyFixture: &historyFixture{st: st, c: historyv1.NewHistoryServiceClient(ts.conn), ts: ts},
		hs:             hs, ended: ended,
	}
}

// watchClient is a HistoryService client on a connection of its own (a fixture's connection
// carries at most DefaultMaxConcurrentStreams streams at once).
func (f *watchFixture) watchClient(t *testing.T, opts ...grpc.DialOption) historyv1.HistoryServiceClient {
	t.Helper()
	return historyv1.NewHistoryServiceClient(f.ts.dial(t, opts...))
}

// openWatch opens WatchBranch and returns the stream and its record once the start frame is in.
func openWatch(ctx context.Context, t *testing.T, c historyv1.HistoryServiceClient, req *historyv1.WatchBranchRequest) (historyv1.HistoryService_WatchBranchClient, *watchStream) {
	t.Helper()
	s, err := c.WatchBranch(ctx, req)
	if err != nil {
		t.Fatalf("WatchBranch: %v", err)
	}
	rec := &watchStream{after: req.AfterSequence, filtered: len(req.GetKinds()) > 0}
	f, err := s.Recv()
	if err != nil {
		t.Fatalf("WatchBranch(%v) first frame: %v", req, err)
	}
	rec.frames = append(rec.frames, f)
	return s, rec
}

// recvUntil reads frames into rec until done says stop (it is asked after each frame; nil reads to
// the end) or the stream ends, whose error it records. It returns whether the stream ended.
func recvUntil(s historyv1.HistoryService_WatchBranchClient, rec *watchStream, done func(*historyv1.WatchBranchResponse) bool) bool {
	for {
		f, err := s.Recv()
		if err != nil {
			rec.end = err
			return true
		}
		rec.frames = append(rec.frames, f)
		if done != nil && done(f) {
			return false
		}
	}
}

// through returns a done function for recvUntil that stops once the cursor reaches seq.
func through(seq uint64) func(*historyv1.WatchBranchResponse) bool {
	return func(f *historyv1.WatchBranchResponse) bool {
		return f.GetCommit().GetLastSequence() >= seq || f.GetHeartbeat().GetHeadSequence() >= seq
	}
}

// startErr opens a stream that must fail before its first frame and returns the error.
func startErr(t *testing.T, c historyv1.HistoryServiceClient, req *historyv1.WatchBranchRequest) error {
	t.Helper()
	s, err := c.WatchBranch(testContext(t), req)
	if err != nil {
		return err
	}
	f, err := s.Recv()
	if err == nil {
		t.Fatalf("WatchBranch(%v) sent %v, want an error", req, f)
	}
	if errors.Is(err, io.EOF) {
		t.Fatalf("WatchBranch(%v) ended with OK; a watch stream never does", req)
	}
	return err
}

// mustValid fails the test with what the validator found.
func mustValid(t *testing.T, sessions ...watchSession) {
	t.Helper()
	for _, err := range validateSessions(sessions...) {
		t.Error(err)
	}
}

// contextWithCancel is testContext with a cancel of its own.
func contextWithCancel(t *testing.T) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(testContext(t))
	t.Cleanup(cancel)
	return ctx, cancel
}
