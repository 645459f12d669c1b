//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Issue 15: "A crash harness against the real binary: concurrent writers (AddMessage with request
// ids, CreateActionResponse, ForkBranch, DeleteBranch, SetProgression, ImportBranch) and watchers,
// kill -9 at random moments, then restart on the same data dir. After each restart a checker
// verifies: every acknowledged write is present with its sequence; per-branch sequences are
// gap-free; no commit is half applied (an ActionResponse and its request's action_response_id:
// both or neither; a fork whole or absent); a retried unacknowledged request_id writes at most
// once; each watcher resumes from its cursor with no gap and no duplicate. In `make e2e` it runs at
// least 20 cycles within 90 seconds and prints `crash: N cycles, W acknowledged writes, 0 lost,
// 0 duplicated, 0 half-applied` (with the seed, to replay a failure); `make crash` runs 200. Both
// `--sync` modes are exercised."
//
// A cycle: start historyd on the data dir; retry, with the same request id, each write that was in
// flight at the last kill (crash_ops_test.go), which resolves it; check the server against the
// model of acknowledged writes (crash_model_test.go, crash_check_test.go); resume each watcher from
// its cursor and compare what it rebuilt with the branch (crash_watch_test.go); then writers and
// watchers run for a random 50-400 ms and historyd is killed with SIGKILL. A last restart checks
// the last kill.

// The harness's knobs: HISTORYD_CRASH_SEED replays a run's random choices (which writes, where, and
// when the kill comes; what was in flight at it depends on the scheduler too), HISTORYD_CRASH_CYCLES
// sets the kills per sync mode.
const (
	crashSeedEnv       = "HISTORYD_CRASH_SEED"
	crashCyclesEnv     = "HISTORYD_CRASH_CYCLES"
	crashDefaultCycles = 30 // about 0.35 s each on a loaded 2-core machine: some 11 s a mode, well within 90 s
	crashWriters       = 4
	crashWatchers      = 3
	crashMinLoad       = 50 * time.Millisecond
	crashMaxLoad       = 400 * time.Millisecond
	crashMaxDetails    = 50 // violations described; the counts include every one
)

func TestCrash(t *testing.T) {
	seed := rand.Uint64()
	if s := os.Getenv(crashSeedEnv); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("%s=%q: %v", crashSeedEnv, s, err)
		}
	}
	cycles := crashDefaultCycles
	if s := os.Getenv(crashCyclesEnv); s != "" {
		var err error
		if cycles, err = strconv.Atoi(s); err != nil || cycles < 1 {
			t.Fatalf("%s=%q: want a positive number of cycles", crashCyclesEnv, s)
		}
	}
	for i, sync := range []string{"normal", "full"} {
		t.Run(sync, func(t *testing.T) {
			r := newCrashRun(t, sync, seed, uint64(i))
			r.run(t.TempDir(), cycles)
		})
	}
}

// crashRun is one sync mode's run: the model, the writers and watchers, and the violations found.
type crashRun struct {
	t       *testing.T
	sync    string
	seed    uint64
	rng     *rand.Rand
	m       *crashModel
	writers []*crashWriter
	setupW  *crashWriter // makes and replaces the shared branch between cycles
	shared  *mBranch
	watches []*crashWatch
	pending []*crashOp // in flight at the last kill: unknown until retried

	mu                            sync.Mutex
	cycles                        int
	retried, replayed, resumed    int // retries; of them, first responses from before the kill; watch resumes
	lost, duplicated, halfApplied int
	details                       []string
	failed                        bool // a violation or an unexpected error: the model no longer holds
}

func newCrashRun(t *testing.T, sync string, seed, stream uint64) *crashRun {
	r := &crashRun{t: t, sync: sync, seed: seed, rng: rand.New(rand.NewPCG(seed, stream)), m: newCrashModel()}
	for i := range crashWriters + 1 {
		w := &crashWriter{id: i, rng: rand.New(rand.NewPCG(r.rng.Uint64(), r.rng.Uint64())), m: r.m}
		if i == crashWriters {
			r.setupW = w
		} else {
			r.writers = append(r.writers, w)
		}
	}
	return r
}

// run runs the cycles on dir, then a last restart and check, and prints the crash line.
func (r *crashRun) run(dir string, cycles int) {
	begin := time.Now()
	defer func() { // also after a t.Fatal: the line gives the seed to replay it
		fmt.Printf("crash: %d cycles, %d acknowledged writes, %d lost, %d duplicated, %d half-applied (sync=%s, seed=%d)\n",
			r.cycles, r.m.acked, r.lost, r.duplicated, r.halfApplied, r.sync, r.seed)
		r.t.Logf("%d cycles in %v; %d writes in flight at the kills retried, %d of them answered with a first response "+
			"from before the kill; %d watches resumed", r.cycles, time.Since(begin).Round(time.Millisecond), r.retried, r.replayed, r.resumed)
		for _, d := range r.details {
			r.t.Error(d)
		}
		if n := r.lost + r.duplicated + r.halfApplied; n > len(r.details) {
			r.t.Errorf("... and %d more violations", n-len(r.details))
		}
	}()
	for r.cycles < cycles && !r.failed {
		r.cycle(dir, true)
		r.cycles++
	}
	if !r.failed {
		r.cycle(dir, false)
	}
}

// violate counts a violation in *count and describes it.
func (r *crashRun) violate(count *int, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*count++
	r.failed = true
	if len(r.details) < crashMaxDetails {
		r.details = append(r.details, fmt.Sprintf("cycle %d (sync=%s, seed=%d): ", r.cycles, r.sync, r.seed)+fmt.Sprintf(format, args...))
	}
}

// fail reports an error that is no violation of durability (an RPC failing before the kill) but
// leaves the model unsure.
func (r *crashRun) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.t.Errorf("cycle %d (sync=%s, seed=%d): %s", r.cycles, r.sync, r.seed, fmt.Sprintf(format, args...))
}

// watchFailed counts a watch's broken order (a gap is lost, a repeat duplicated).
func (r *crashRun) watchFailed(err error) {
	var wv *watchViolation
	if errors.As(err, &wv) && wv.duplicate {
		r.violate(&r.duplicated, "%v", err)
		return
	}
	r.violate(&r.lost, "%v", err)
}

// cycle restarts historyd on dir, resolves and checks, then (kill) loads it and kills it, or stops
// it: after a violation the model no longer says what the server must hold, so the run ends.
func (r *crashRun) cycle(dir string, kill bool) {
	p := startSQLite(r.t, dir, "--sync", r.sync)
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close()
	c := historyv1.NewHistoryServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()

	r.retry(ctx, c, time.Now())
	read := r.check(ctx, c)
	r.resume(ctx, c, read)
	if !kill || r.failed {
		cancel() // the watches end before the server does
		stop(r.t, p, syscall.SIGTERM, startTimeout)
		return
	}
	r.setup(ctx, c)
	r.load(ctx, c, p)
}

// retry sends again each write that was in flight at the kill, with its request id: whether or not
// it had committed, it is acknowledged now, once.
// Only to show that both outcomes occur, a retry whose response was made before restarted (its
// message's or branch's created_at) is counted as replayed.
func (r *crashRun) retry(ctx context.Context, c historyv1.HistoryServiceClient, restarted time.Time) {
	for _, op := range r.pending {
		resp, err := op.call(ctx, c)
		if err != nil {
			r.fail("retrying %s after the restart: %v", op.desc, err)
			continue
		}
		r.retried++
		if at := createdAt(resp); at > 0 && at < float64(restarted.UnixNano())/1e9 {
			r.replayed++
		}
		if err := op.apply(resp); err != nil {
			r.violate(&r.lost, "retried %s: %v", op.desc, err)
		}
	}
	r.pending = nil
}

// createdAt is the creation time of what a write made, in seconds, or 0 for a write that makes
// neither a message nor a branch.
func createdAt(resp proto.Message) float64 {
	switch r := resp.(type) {
	case *historyv1.AddMessageResponse:
		return r.GetMessage().GetCreatedAt()
	case *historyv1.CreateActionResponseResponse:
		return r.GetActionResponse().GetCreatedAt()
	case *historyv1.CreateBranchResponse:
		return r.GetBranch().GetCreatedAt()
	case *historyv1.ForkBranchResponse:
		return r.GetBranch().GetCreatedAt()
	case *historyv1.ImportBranchResponse:
		return r.GetBranch().GetCreatedAt()
	}
	return 0
}

// resume resumes each watch from its cursor after the restart, reads up to the head and compares
// what it rebuilt with the branch as the checker read it.
func (r *crashRun) resume(ctx context.Context, c historyv1.HistoryServiceClient, read map[string]*crashBranch) {
	var kept []*crashWatch
	for _, w := range r.watches {
		b := r.m.branches[w.name]
		if w.deleted {
			continue // it saw the branch's end
		}
		cursor := w.cursor
		start, err := w.open(ctx, c)
		if err != nil {
			if status.Code(err) != codes.NotFound || !b.deleted {
				r.violate(&r.lost, "watch of %s cannot resume after %d: %v", w.name, cursor, err)
			}
			continue
		}
		if err := w.catchUp(start.GetHeadSequence()); err != nil {
			r.watchFailed(err)
			continue
		}
		if cb := read[b.id]; cb != nil {
			if d := w.agree(listedWatch(cb.msgs, cb.replay.events)); d != "" {
				r.violate(&r.lost, "watch of %s, resumed after %d, disagrees with the branch: %s", w.name, cursor, d)
			}
		}
		r.resumed++
		kept = append(kept, w)
	}
	r.watches = kept
}

// setup replaces a long shared branch and starts watches up to crashWatchers, from sequence 0.
func (r *crashRun) setup(ctx context.Context, c historyv1.HistoryServiceClient) {
	if r.shared == nil || len(r.shared.msgs) >= crashMaxShared {
		if r.shared != nil {
			r.do(ctx, c, r.setupW.delete(r.shared))
		}
		var op *crashOp
		r.m.mu.Lock()
		op, r.shared = r.setupW.createFor(sharedOwner)
		r.m.mu.Unlock()
		r.do(ctx, c, op)
	}
	watched := map[string]bool{}
	for _, w := range r.watches {
		watched[w.name] = true
	}
	for len(r.watches) < crashWatchers {
		b := r.shared
		if watched[b.name] {
			b = r.unwatched(watched)
		}
		if b == nil {
			return
		}
		w := newCrashWatch(b)
		if _, err := w.open(ctx, c); err != nil {
			r.t.Fatalf("watching %s: %v", b.name, err)
		}
		watched[b.name] = true
		r.watches = append(r.watches, w)
	}
}

// unwatched returns a random live branch a writer writes that no watch follows, or nil.
func (r *crashRun) unwatched(watched map[string]bool) *mBranch {
	var free []*mBranch
	for _, b := range r.m.branches {
		if b.live() && !b.fork && !watched[b.name] {
			free = append(free, b)
		}
	}
	if len(free) == 0 {
		return nil
	}
	sortBranches(free)
	return free[r.rng.IntN(len(free))]
}

// do sends a write outside the load, which must succeed.
func (r *crashRun) do(ctx context.Context, c historyv1.HistoryServiceClient, op *crashOp) {
	resp, err := op.call(ctx, c)
	if err != nil {
		r.t.Fatalf("%s: %v", op.desc, err)
	}
	if err := op.apply(resp); err != nil {
		r.violate(&r.lost, "%s: %v", op.desc, err)
	}
}

// load runs the writers and watches, then kills historyd after a random delay; the writes in
// flight at the kill become pending.
func (r *crashRun) load(ctx context.Context, c historyv1.HistoryServiceClient, p *proc) {
	var killed atomic.Bool
	var wg sync.WaitGroup
	for _, w := range r.watches {
		wg.Go(func() { r.follow(w, &killed) })
	}
	inFlight := make([]*crashOp, len(r.writers))
	for i, w := range r.writers {
		wg.Go(func() { inFlight[i] = r.write(ctx, c, w, &killed) })
	}
	// The kill's moment is the point of the harness, not a synchronisation: a timer draws it.
	delay := crashMinLoad + time.Duration(r.rng.Int64N(int64(crashMaxLoad-crashMinLoad)))
	timer := time.NewTimer(delay)
	<-timer.C
	killed.Store(true)
	stop(r.t, p, syscall.SIGKILL, startTimeout)
	wg.Wait()
	for _, op := range inFlight {
		if op != nil {
			r.pending = append(r.pending, op)
		}
	}
}

// write runs one writer until the kill and returns its write in flight at the kill, or nil.
func (r *crashRun) write(ctx context.Context, c historyv1.HistoryServiceClient, w *crashWriter, killed *atomic.Bool) *crashOp {
	for !killed.Load() {
		r.m.mu.Lock()
		op := w.next(r.shared)
		r.m.mu.Unlock()
		resp, err := op.call(ctx, c)
		if err != nil {
			if killed.Load() {
				return op
			}
			r.fail("%s, before the kill: %v", op.desc, err)
			return nil
		}
		if err := op.apply(resp); err != nil {
			r.violate(&r.lost, "%s: %v", op.desc, err)
		}
	}
	return nil
}

// follow reads a watch's live commits until the kill ends its stream (or its branch is deleted).
func (r *crashRun) follow(w *crashWatch, killed *atomic.Bool) {
	for {
		f, err := w.stream.Recv()
		if err != nil {
			if !killed.Load() && (!w.deleted || status.Code(err) != codes.NotFound) {
				r.fail("watch of %s ended before the kill: %v", w.name, err)
			}
			return
		}
		if err := w.frame(f); err != nil {
			r.watchFailed(err)
			return
		}
	}
}
