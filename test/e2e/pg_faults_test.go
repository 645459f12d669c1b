//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// Issue 16's Faults bullet: "PostgreSQL unreachable at start: historyd retries with backoff, health
// NOT_SERVING until it connects, a clear log line; the connection lost mid-run: calls fail
// UNAVAILABLE (retryable), nothing half-applied, open streams end UNAVAILABLE and the client package
// resumes them; health follows. Test it through a small TCP proxy written in the test, which the
// test cuts and restores" (pgProxy, pg_faults_proxy_test.go).

// pgFaultSecret is a password put in the URL a replica is given: PostgreSQL here trusts local
// connections and never asks for it, and no log line may show it (a URL in a log is redacted).
const pgFaultSecret = "e2e-not-for-logs"

// TestPGFaultUnreachableAtStart: with the proxy refusing, historyd starts serving with health
// NOT_SERVING (overall and historyd.v1.HistoryService), calls fail UNAVAILABLE, and it logs that it
// is retrying; once the proxy relays, it connects without a restart: SERVING, and a write and its
// read-back work.
func TestPGFaultUnreachableAtStart(t *testing.T) {
	noLeaks(t)
	base := pgtest.New(t)
	proxy := newPGProxy(t, pgHostPort(t, base), false)
	p := startReplicaProcess(t, withPassword(t, proxiedURL(t, base, proxy), pgFaultSecret))
	awaitServingLine(t, p)
	ctx := faultCtx(t)
	conn := dial(t, p)
	c, hc := historyv1.NewHistoryServiceClient(conn), healthpb.NewHealthClient(conn)

	for _, service := range []string{"", historyv1.HistoryService_ServiceDesc.ServiceName} {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Fatalf("health of %q with PostgreSQL unreachable: %v, %v; want NOT_SERVING", service, resp.GetStatus(), err)
		}
	}
	line := waitLogWhere(t, p, "a line saying it retries the database", func(l string) bool {
		l = strings.ToLower(l)
		return strings.Contains(l, "retr") && (strings.Contains(l, "postgres") || strings.Contains(l, "database"))
	})
	t.Logf("the retry line: %s", line)
	if _, err := c.CreateBranch(ctx, &historyv1.CreateBranchRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("CreateBranch with PostgreSQL unreachable: %v, want UNAVAILABLE", err)
	} else {
		t.Logf("CreateBranch with PostgreSQL unreachable: %v (reason %s)", err, reasonOf(err))
	}

	// "retries with backoff": it keeps trying, not once.
	waitFor(t, proxy.arrivals, fmt.Sprintf("%d connection attempts refused", faultReconnects), func() bool {
		_, refused := proxy.counts()
		return refused >= faultReconnects
	})
	proxy.restore()
	waitServing(t, p)
	a := acked{}
	branch := newBranch(ctx, t, c)
	if err := a.add(ctx, c, branch, "after PostgreSQL answered"); err != nil {
		t.Fatalf("a write once SERVING: %v", err)
	}
	a.check(ctx, t, c)
	relayed, refused := proxy.counts()
	t.Logf("%d connections refused before the restore, %d relayed after", refused, relayed)
	for _, l := range p.stderr.Lines() {
		if strings.Contains(l, pgFaultSecret) {
			t.Errorf("a log line shows the URL's password: %s", l)
		}
	}
	stopReplicas(t, p)
}

// withPassword is the URL u with password set.
func withPassword(t *testing.T, u, password string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil || parsed.User == nil {
		t.Fatalf("%s is not a postgres:// URL with a user", pgtest.Redact(u))
	}
	parsed.User = url.UserPassword(parsed.User.Username(), password)
	return parsed.String()
}

// waitLogWhere waits until one of p's log lines satisfies match and returns it; the ticker paces
// the checks, the deadline bounds them.
func waitLogWhere(t *testing.T, p *proc, what string, match func(string) bool) string {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	for {
		lines := p.stderr.Lines()
		for _, l := range lines {
			if match(l) {
				return l
			}
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("no log line within %v: %s:\n%s", startTimeout, what, strings.Join(lines, "\n"))
		}
	}
}

// The fault tests' sizes: acknowledged writes before the cut, failed attempts and refused
// reconnections during it (and refused connections at a start), acknowledged writes after the
// restore; and a writer's pause between two attempts of a
// failed write (a client's retry backoff).
const (
	faultAcksBefore = 20
	faultFailures   = 8
	faultReconnects = 3
	faultAcksAfter  = 20
	faultRetryPause = 50 * time.Millisecond
)

// TestPGFaultConnectionLost: the crash harness's writers (crash_ops_test.go: request ids on every
// write, CreateActionResponse's two events in one commit, forks, imports) write through a replica
// whose PostgreSQL connections the proxy cuts mid-run. During the cut every attempt fails
// UNAVAILABLE (STORAGE_UNAVAILABLE) and is retried with its request id until it succeeds, health is
// NOT_SERVING, a read fails the same way, and the open WatchBranch stream ends UNAVAILABLE; after
// the restore health is SERVING, and the harness's checker finds every acknowledged write (the
// retried ones included) there once and nothing half-applied; the raw watch resumes from its
// cursor; and the Go client's Watch (client.Watch), open throughout, resumed by itself and
// delivered every commit once, in order.
func TestPGFaultConnectionLost(t *testing.T) {
	noLeaks(t)
	base := pgtest.New(t)
	proxy := newPGProxy(t, pgHostPort(t, base), true)
	p := startReplicas(t, proxiedURL(t, base, proxy), 1)[0]
	ctx := faultCtx(t)
	conn := dial(t, p)
	c := historyv1.NewHistoryServiceClient(conn)
	var wg sync.WaitGroup // the watches and the health watch
	defer wg.Wait()
	var writing sync.WaitGroup
	defer writing.Wait()
	watchCtx, stopWatching := context.WithCancel(ctx) // every stream the test opens
	defer stopWatching()
	r := newCrashRun(t, "postgres", crashSeed(t), 0, 1)
	r.setup(watchCtx, c) // the shared branch, and a WatchBranch stream on it
	if len(r.watches) != 1 {
		t.Fatalf("the harness opened %d watches, want one on the shared branch", len(r.watches))
	}
	shared := r.shared

	stop := make(chan struct{})
	stopWriters := sync.OnceFunc(func() { close(stop) })
	defer stopWriters() // deferred calls run last first: the writers and watches are told to stop, then waited for
	progress := make(chan struct{}, 1)
	nudge := func() {
		select {
		case progress <- struct{}{}:
		default:
		}
	}

	healthCh := watchHealth(watchCtx, t, healthpb.NewHealthClient(conn), &wg)
	raw := r.watches[0]
	rawEnd := make(chan error, 1)
	wg.Go(func() {
		for {
			f, err := raw.stream.Recv()
			if err == nil {
				err = raw.frame(f)
			}
			if err != nil {
				rawEnd <- err
				return
			}
		}
	})
	gw := newClientWatch(t, p.addr, shared)
	wg.Go(func() { gw.run(watchCtx, nudge) })

	st := &faultStats{}
	inFlight := make([]*crashOp, len(r.writers))
	for i, w := range r.writers {
		writing.Go(func() { inFlight[i] = r.writeRetrying(ctx, c, w, stop, st, nudge) })
	}
	waitFor(t, progress, fmt.Sprintf("%d writes acknowledged before the cut", faultAcksBefore), func() bool { return st.get().acked >= faultAcksBefore })

	proxy.cut()
	cutAt := time.Now()
	_, refusedAtCut := proxy.counts()
	beforeCut := st.get().recent // acknowledged before the cut: their request ids must survive it
	waitHealth(t, healthCh, healthpb.HealthCheckResponse_NOT_SERVING, "after the cut")
	select {
	case err := <-rawEnd:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("the WatchBranch stream open at the cut ended with %v, want UNAVAILABLE", err)
		}
		t.Logf("the WatchBranch stream open at the cut ended: %v (reason %s)", err, reasonOf(err))
	case <-time.After(startTimeout):
		t.Fatalf("the WatchBranch stream open at the cut had not ended %v later", startTimeout)
	}
	// The cut lasts until the writers have failed faultFailures times and historyd has tried to
	// reconnect (the proxy refused it) faultReconnects times: its retries, not one lucky attempt.
	// The writers' failures nudge progress every faultRetryPause, so both counts are looked at.
	waitFor(t, progress, fmt.Sprintf("%d failed attempts and %d refused reconnections during the cut", faultFailures, faultReconnects), func() bool {
		_, refused := proxy.counts()
		return st.get().failed >= faultFailures && refused-refusedAtCut >= faultReconnects
	})
	if _, err := c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: shared.id}); !isStorageUnavailable(err) {
		t.Errorf("GetBranch during the cut: %v, want UNAVAILABLE (STORAGE_UNAVAILABLE)", err)
	}
	atRestore := st.get()
	proxy.restore()
	cutFor := time.Since(cutAt)
	waitHealth(t, healthCh, healthpb.HealthCheckResponse_SERVING, "after the restore")
	waitFor(t, progress, fmt.Sprintf("%d more writes acknowledged after the restore", faultAcksAfter),
		func() bool { return st.get().acked >= atRestore.acked+faultAcksAfter })
	stopWriters()
	writing.Wait()
	// A late retry (a client whose deadline ran out before the answer came) of a write acknowledged
	// before the cut gets the first response and writes nothing; the checker below counts a second
	// copy. It needs no luck, where a write that committed just as the cut came needs the cut to
	// fall between PostgreSQL's commit and its answer.
	// The writers went on after the restore and may have deleted the branch of the last AddMessage
	// before the cut (a retry to a deleted branch is NOT_FOUND, rightly; CI saw it once), so the
	// retry is of the newest one whose branch the model says is live and no write still in flight
	// names (a DeleteBranch in flight at the stop may have committed).
	var resent *ackedOp
	r.m.mu.Lock()
	for i := len(beforeCut) - 1; i >= 0 && resent == nil; i-- {
		b := beforeCut[i].op.branch
		if b.live() && !slices.ContainsFunc(inFlight, func(op *crashOp) bool { return op != nil && op.branch == b }) {
			resent = &beforeCut[i]
		}
	}
	r.m.mu.Unlock()
	if resent == nil {
		t.Fatalf("none of the last %d AddMessages acknowledged before the cut is on a branch still live: nothing to send again", len(beforeCut))
	}
	if again, err := resent.op.call(ctx, c); err != nil || !proto.Equal(again, resent.resp) {
		t.Errorf("%s, acknowledged before the cut, sent again with its request id after the restore: %v, %v; want the first response %v",
			resent.op.desc, again, err, resent.resp)
	}
	for _, op := range inFlight {
		if op != nil {
			r.pending = append(r.pending, op)
		}
	}
	r.retry(ctx, c, cutAt)
	read := r.check(watchCtx, c)
	r.resume(watchCtx, c, read)
	cb := read[shared.id]
	if cb == nil {
		t.Fatalf("the checker did not read the shared branch %s", shared.name)
	}
	waitFor(t, progress, "the client's watch to reach the head", func() bool {
		cursor, err := gw.at()
		return cursor >= cb.replay.cursor || err != nil
	})
	stopWatching()
	wg.Wait()

	final := st.get()
	_, refused := proxy.counts()
	fmt.Printf("pg faults: connection cut for %.1fs (%d reconnections refused): %d attempts failed, %d writes landed when retried with their request ids, %d acknowledged, "+
		"the client's watch resumed %d times, %d lost, %d duplicated, %d half-applied (seed=%d)\n", cutFor.Seconds(), refused-refusedAtCut, final.failed, final.recovered,
		r.m.acked, len(gw.resumes), r.lost, r.duplicated, r.halfApplied, r.seed)
	r.reportViolations()
	for _, e := range final.wrong[:min(len(final.wrong), 10)] {
		t.Error(e)
	}
	if len(final.wrong) > 0 {
		t.Errorf("%d of %d failed attempts were not UNAVAILABLE (STORAGE_UNAVAILABLE)", len(final.wrong), final.failed)
	}
	if final.recovered == 0 {
		t.Errorf("no write failed during the cut and then landed: the retry with its request id was not tested")
	}
	if r.resumed != 1 {
		t.Errorf("the harness's watch resumed %d times after the restore, want once", r.resumed)
	}
	gw.verify(t, cb)
	stopReplicas(t, p)
}

// faultStats counts the writers' attempts; get returns a copy.
type faultStats struct {
	mu        sync.Mutex
	acked     int       // acknowledged writes
	failed    int       // failed attempts
	recovered int       // writes acknowledged after a failed attempt
	wrong     []string  // failed attempts that were not UNAVAILABLE with STORAGE_UNAVAILABLE
	recent    []ackedOp // the last faultRecent AddMessages acknowledged, the newest last
}

// faultRecent is how many of the last acknowledged AddMessages faultStats keeps.
const faultRecent = 16

// ackedOp is a write and its response.
type ackedOp struct {
	op   *crashOp
	resp proto.Message
}

func (s *faultStats) get() faultStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return faultStats{acked: s.acked, failed: s.failed, recovered: s.recovered, wrong: append([]string(nil), s.wrong...), recent: slices.Clone(s.recent)}
}

func (s *faultStats) update(f func(s *faultStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// writeRetrying runs one crash-harness writer until stop: each write is sent, and on failure sent
// again with its request id every faultRetryPause until acknowledged, as a client rides out an
// outage. It returns the write it was still retrying at stop, or nil.
func (r *crashRun) writeRetrying(ctx context.Context, c historyv1.HistoryServiceClient, w *crashWriter, stop <-chan struct{}, st *faultStats, nudge func()) *crashOp {
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		r.m.mu.Lock()
		op := w.next(r.shared)
		r.m.mu.Unlock()
		for failures := 0; ; failures++ {
			resp, err := op.call(ctx, c)
			if err == nil {
				if err := op.apply(resp); err != nil {
					r.violate(&r.lost, "%s: %v", op.desc, err)
				}
				st.update(func(s *faultStats) {
					s.acked++
					if op.resend {
						s.recent = append(s.recent, ackedOp{op, resp})
						if len(s.recent) > faultRecent {
							s.recent = s.recent[1:]
						}
					}
					if failures > 0 {
						s.recovered++
					}
				})
				nudge()
				break
			}
			st.update(func(s *faultStats) {
				s.failed++
				if !isStorageUnavailable(err) {
					s.wrong = append(s.wrong, fmt.Sprintf("%s: %v", op.desc, err))
				}
			})
			nudge()
			select {
			case <-stop:
				return op
			case <-time.After(faultRetryPause):
			}
		}
	}
}
