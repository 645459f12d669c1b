package server

import (
	"context"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
)

// inflight counts the RPC handlers running. Shutdown needs to tell two waits apart: handlers still
// working, which the grace period is for, and every handler returned with only its last frames and
// trailers queued behind a client that stopped reading (HTTP/2 flow control), which GracefulStop
// would otherwise wait out to the end of the grace period, and which no client that is reading
// needs more than a moment for.
//
// start and done are on every call's path, so they only add to an atomic count; the lock is taken
// when the count crosses zero, to bring idle in line with it.
type inflight struct {
	n atomic.Int64

	mu     sync.Mutex
	idle   chan struct{} // closed while no handler runs; a new one once a call starts
	closed bool          // idle is closed
}

func newInflight() *inflight {
	idle := make(chan struct{})
	close(idle)
	return &inflight{idle: idle, closed: true}
}

func (f *inflight) start() {
	if f.n.Add(1) == 1 {
		f.sync()
	}
}

func (f *inflight) done() {
	if f.n.Add(-1) == 0 {
		f.sync()
	}
}

// sync brings idle in line with the count. Every crossing of zero is followed by a sync, and
// crossings that race settle in whichever sync runs last: it reads the count as it now is.
func (f *inflight) sync() {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch running := f.n.Load() > 0; {
	case running && f.closed:
		f.idle, f.closed = make(chan struct{}), false
	case !running && !f.closed:
		close(f.idle)
		f.closed = true
	}
}

// whenIdle returns a channel that is closed once no handler runs (at once, if none does now).
func (f *inflight) whenIdle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.idle
}

// running is the number of handlers running.
func (f *inflight) running() int { return int(f.n.Load()) }

// unary and stream are the outermost link of the chain; they also mark the call as seen by the
// chain, for unchainedLogger, and time the call's waits on its client (recv_timeout.go): a unary
// call's request has been read when the chain runs, and a stream's Recvs are timed from here.
func (f *inflight) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if w := recvWatchFrom(ctx); w != nil && !w.bodyRead() {
		// The body came as the timer ended the call: not marked chained, so that unchainedLogger
		// logs it (the links that would have are inside this one).
		return nil, w.status().Err()
	}
	markChained(ctx)
	f.start()
	defer f.done()
	return handler(ctx, req)
}

func (f *inflight) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	markChained(ss.Context())
	f.start()
	defer f.done()
	return handler(srv, timeStream(ss))
}
