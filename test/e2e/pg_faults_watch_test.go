//go:build e2e

package e2e

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The fault tests' followers (pg_faults_test.go): the health watch, the Go client's resuming watch,
// and waitFor, which waits on a condition nudged by them.

// watchHealth follows the overall grpc.health.v1 status until ctx ends; the channel carries each
// status sent, and is closed when the stream ends.
func watchHealth(ctx context.Context, t *testing.T, hc healthpb.HealthClient, wg *sync.WaitGroup) <-chan healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	s, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatalf("Health/Watch: %v", err)
	}
	ch := make(chan healthpb.HealthCheckResponse_ServingStatus)
	wg.Go(func() {
		defer close(ch)
		for {
			resp, err := s.Recv()
			if err != nil {
				return
			}
			select {
			case ch <- resp.GetStatus():
			case <-ctx.Done():
				return
			}
		}
	})
	return ch
}

// waitHealth reads ch until it carries want, failing t at startTimeout.
func waitHealth(t *testing.T, ch <-chan healthpb.HealthCheckResponse_ServingStatus, want healthpb.HealthCheckResponse_ServingStatus, when string) {
	t.Helper()
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	var last healthpb.HealthCheckResponse_ServingStatus
	for {
		select {
		case st, ok := <-ch:
			if !ok {
				t.Fatalf("the health watch ended %s, before %v", when, want)
			}
			if st == want {
				return
			}
			last = st
		case <-deadline.C:
			t.Fatalf("health %s: still %v after %v, want %v", when, last, startTimeout, want)
		}
	}
}

// waitFor waits, nudged by progress and bounded by startTimeout, until cond holds.
func waitFor(t *testing.T, progress <-chan struct{}, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-progress:
		case <-deadline.C:
			t.Fatalf("waited %v for %s", startTimeout, what)
		}
	}
}

// clientWatch follows a branch with the Go client's Watch (client/watch.go), which resumes a stream
// that ended UNAVAILABLE by itself, and rebuilds the branch from what it yields with the crash
// harness's crashWatch, for which a gap or a repeat is a violation.
type clientWatch struct {
	cl *client.Client

	mu      sync.Mutex
	w       *crashWatch
	resumes []client.Resume
	err     error // what ended the watch before the test stopped it, or a violation
}

// clientWatchRetry rides out the cut: the default gives up after about 12 s of failed attempts.
var clientWatchRetry = client.RetryPolicy{MaxAttempts: 200, InitialBackoff: 50 * time.Millisecond, MaxBackoff: 500 * time.Millisecond, Multiplier: 2, Jitter: 0.2}

func newClientWatch(t *testing.T, addr string, b *mBranch) *clientWatch {
	t.Helper()
	cl, err := client.Dial(addr, client.WithInsecure())
	if err != nil {
		t.Fatalf("client.Dial: %v", err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	return &clientWatch{cl: cl, w: newCrashWatch(b)}
}

// run watches from sequence 0 until ctx ends or the watch fails.
func (g *clientWatch) run(ctx context.Context, nudge func()) {
	req := &historyv1.WatchBranchRequest{BranchId: g.w.id, AfterSequence: proto.Uint64(0)}
	onResume := client.OnResume(func(r client.Resume) {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.resumes = append(g.resumes, r)
	})
	for commit, err := range g.cl.Watch(ctx, req, client.WithWatchRetry(clientWatchRetry), onResume) {
		g.mu.Lock()
		if err == nil {
			err = g.w.frame(&historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Commit{Commit: commit}})
		}
		if err != nil && ctx.Err() == nil {
			g.err = err
		}
		g.mu.Unlock()
		nudge()
		if err != nil {
			return
		}
	}
}

// at returns the watch's cursor and what ended it, if anything has.
func (g *clientWatch) at() (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.w.cursor, g.err
}

// verify checks, once run has returned, that the watch resumed after an UNAVAILABLE end and
// rebuilt the branch cb as the checker read it: every commit once, in order.
func (g *clientWatch) verify(t *testing.T, cb *crashBranch) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.err != nil {
		var wv *watchViolation
		if errors.As(g.err, &wv) {
			t.Errorf("the client's watch across the cut: %v", g.err)
		} else {
			t.Errorf("the client's watch ended: %v", g.err)
		}
		return
	}
	if len(g.resumes) == 0 {
		t.Errorf("the client's watch never resumed: its stream was not ended by the cut")
	} else if status.Code(g.resumes[0].Cause) != codes.Unavailable {
		t.Errorf("the client's watch first resumed after %v, want UNAVAILABLE", g.resumes[0].Cause)
	}
	if d := g.w.agree(listedWatch(cb.msgs, cb.replay.events)); d != "" {
		t.Errorf("the client's watch, resumed across the cut, disagrees with the branch: %s", d)
	}
}
