package server

import (
	"context"
	"sync"

	"google.golang.org/grpc"
)

// inflight counts the RPC handlers running. Shutdown needs to tell two waits apart: handlers still
// working, which the grace period is for, and every handler returned with only its last frames and
// trailers queued behind a client that stopped reading (HTTP/2 flow control), which GracefulStop
// would otherwise wait out to the end of the grace period, and which no client that is reading
// needs more than a moment for.
type inflight struct {
	mu   sync.Mutex
	n    int
	idle chan struct{} // closed while n == 0; a new one once a call starts
}

func newInflight() *inflight {
	idle := make(chan struct{})
	close(idle)
	return &inflight{idle: idle}
}

func (f *inflight) start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		f.idle = make(chan struct{})
	}
	f.n++
}

func (f *inflight) done() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	if f.n == 0 {
		close(f.idle)
	}
}

// whenIdle returns a channel that is closed once no handler runs (at once, if none does now).
func (f *inflight) whenIdle() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.idle
}

// running is the number of handlers running.
func (f *inflight) running() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n
}

// unary and stream are the outermost link of the chain; they also mark the call as seen by the
// chain, for unchainedLogger.
func (f *inflight) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	markChained(ctx)
	f.start()
	defer f.done()
	return handler(ctx, req)
}

func (f *inflight) stream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	markChained(ss.Context())
	f.start()
	defer f.done()
	return handler(srv, ss)
}
