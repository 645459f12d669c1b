//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
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
// watchers run as the cycle's schedule says (crash_schedule_test.go: most cycles a random 50-400 ms
// of writes, some a pause or a longer burst, to kill around the WAL's checkpoints), historyd's
// checkpoint counts are read from /metrics, and historyd is killed with SIGKILL. A last restart
// checks the last kill.

// The harness's knobs: HISTORYD_CRASH_SEED replays a run's random draws, each kind from a stream
// of its own (crash_schedule_test.go). The kill schedule (each cycle's load, pause and kill delay)
// replays exactly: nothing the server answers feeds it. Each writer, and the choice of branches to
// watch, draws the same numbers again, but what a draw chooses depends on the acknowledged state,
// and which writes are in flight at a kill (left unacknowledged, then retried) depends on how the
// processes and goroutines were scheduled. So a replay kills at the same moments with the same
// writers' draws; it reaches the same state only as far as the scheduling repeats.
// HISTORYD_CRASH_CYCLES sets the kills per sync mode.
const (
	crashSeedEnv       = "HISTORYD_CRASH_SEED"
	crashCyclesEnv     = "HISTORYD_CRASH_CYCLES"
	crashDefaultCycles = 30 // about 0.65 s each on a loaded 2-core machine, pauses and bursts included: some 20 s a mode
	crashBudget        = 90 * time.Second
	crashMinCycles     = 20 // issue 15: "at least 20 cycles within 90 seconds"; fewer cannot show each outcome
	crashWriters       = 4
	crashWatchers      = 3
	crashReaders       = 2  // during a burst
	crashMaxDetails    = 50 // violations described; the counts include every one
)

func TestCrash(t *testing.T) {
	seed := crashSeed(t)
	cycles := crashDefaultCycles
	if s := os.Getenv(crashCyclesEnv); s != "" {
		var err error
		if cycles, err = strconv.Atoi(s); err != nil || cycles < 1 {
			t.Fatalf("%s=%q: want a positive number of cycles", crashCyclesEnv, s)
		}
	}
	for i, sync := range []string{"normal", "full"} {
		t.Run(sync, func(t *testing.T) {
			r := newCrashRun(t, sync, seed, i, cycles)
			r.run(t.TempDir())
		})
	}
}

// crashSeed is HISTORYD_CRASH_SEED, or a random seed without it.
func crashSeed(t *testing.T) uint64 {
	t.Helper()
	s := os.Getenv(crashSeedEnv)
	if s == "" {
		return rand.Uint64()
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("%s=%q: %v", crashSeedEnv, s, err)
	}
	return seed
}

// crashRun is one sync mode's run: the model, the writers and watchers, and the violations found.
type crashRun struct {
	t       *testing.T
	sync    string
	seed    uint64
	planned int // the kills the run is to make
	sched   *crashSchedule
	pick    *rand.Rand // which branches the watches follow
	m       *crashModel
	writers []*crashWriter
	setupW  *crashWriter // makes and replaces the shared branch between cycles
	shared  *mBranch
	watches []*crashWatch
	pending []*crashOp // in flight at the last kill: unknown until retried

	mu                            sync.Mutex
	cycles                        int            // kills so far: the cycle under way
	retried, replayed, resumed    int            // retries; of them, first responses from before the kill; watch resumes
	pauses, bursts                int            // kills of those kinds
	checkpoints                   map[string]int // by mode: those the killed servers had run before their kill
	pausesTruncated               int            // pause kills after a truncating checkpoint
	lost, duplicated, halfApplied int
	details                       []string
	failed                        bool // a violation or an unexpected error: the model no longer holds
}

// newCrashRun makes the run of sync mode number mode: its random streams come from seed
// (crash_schedule_test.go).
func newCrashRun(t *testing.T, sync string, seed uint64, mode, cycles int) *crashRun {
	r := &crashRun{
		t: t, sync: sync, seed: seed, planned: cycles, sched: newCrashSchedule(seed, mode, cycles),
		pick: rand.New(rand.NewPCG(seed, crashStream(mode, crashWatchStream))), m: newCrashModel(), checkpoints: map[string]int{},
	}
	for i := range crashWriters + 1 {
		w := &crashWriter{id: i, rng: rand.New(rand.NewPCG(seed, crashStream(mode, crashWriterStream+i))), m: r.m}
		if i == crashWriters {
			r.setupW = w
		} else {
			r.writers = append(r.writers, w)
		}
	}
	return r
}

// run runs the cycles on dir, then a last restart and check, and prints the crash line.
func (r *crashRun) run(dir string) {
	begin := time.Now()
	var budgeted time.Duration // the first crashDefaultCycles cycles' time (all of them, if fewer)
	defer func() {             // also after a t.Fatal: the line gives the seed to replay it
		elapsed := time.Since(begin)
		fmt.Printf("crash: %d cycles in %.1fs, %d acknowledged writes, %d lost, %d duplicated, %d half-applied (sync=%s, seed=%d)\n",
			r.cycles, elapsed.Seconds(), r.m.acked, r.lost, r.duplicated, r.halfApplied, r.sync, r.seed)
		r.t.Logf("%d writes in flight at the kills retried, %d of them answered with a first response from before the kill; "+
			"%d watches resumed; checkpoints before the kills: %d passive, %d restart, %d truncate; %d pauses (%d killed after "+
			"a truncation), %d bursts", r.retried, r.replayed, r.resumed, r.checkpoints["passive"], r.checkpoints["restart"],
			r.checkpoints["truncate"], r.pauses, r.pausesTruncated, r.bursts)
		r.reportViolations()
		r.covered(budgeted)
	}()
	for r.cycles < r.planned && !r.failed {
		r.cycle(dir, true)
		r.cycles++
		if r.cycles == min(r.planned, crashDefaultCycles) {
			budgeted = time.Since(begin)
		}
	}
	if !r.failed {
		r.cycle(dir, false)
	}
}

// covered fails a run of at least crashMinCycles whose checks could have passed without testing
// anything, or whose first crashDefaultCycles cycles took more than make e2e's budget.
func (r *crashRun) covered(budgeted time.Duration) {
	if budgeted > crashBudget {
		r.t.Errorf("issue 15: make e2e runs at least %d cycles within %v a sync mode; %d took %v (sync=%s, seed=%d)",
			crashMinCycles, crashBudget, min(r.planned, crashDefaultCycles), budgeted.Round(time.Millisecond), r.sync, r.seed)
	}
	if r.cycles < crashMinCycles {
		return
	}
	if r.retried == 0 {
		r.t.Errorf("%d cycles and no write in flight at a kill: \"a retried unacknowledged request_id writes at most once\" was not tested", r.cycles)
	}
	if r.replayed == 0 {
		r.t.Errorf("%d cycles and no retried write had committed before its kill (all %d retries wrote afresh): "+
			"\"a retried unacknowledged request_id writes at most once\" was not tested against a committed first try", r.cycles, r.retried)
	}
	if r.resumed == 0 {
		r.t.Errorf("%d cycles and no watch resumed after a kill: \"each watcher resumes from its cursor\" was not tested", r.cycles)
	}
	if r.checkpoints["passive"] == 0 {
		r.t.Errorf("%d cycles (%d of them bursts) and no passive checkpoint ran before a kill: the kills never came "+
			"after the WAL was copied into the database", r.cycles, r.bursts)
	}
	if r.pausesTruncated == 0 {
		r.t.Errorf("%d cycles, %d of them pauses, and no pause's server had run a truncating checkpoint before its kill "+
			"(%d truncations before any kill): the kills never came around the WAL's truncation at a pause in the writes",
			r.cycles, r.pauses, r.checkpoints["truncate"])
	}
}

// reportViolations fails the test with each violation described, and the count of the rest.
func (r *crashRun) reportViolations() {
	for _, d := range r.details {
		r.t.Error(d)
	}
	if n := r.lost + r.duplicated + r.halfApplied; n > len(r.details) {
		r.t.Errorf("... and %d more violations", n-len(r.details))
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
	p := startSQLite(r.t, dir, "--sync", r.sync, "--metrics-addr", "127.0.0.1:0")
	metricsAddr := logAddress(r.t, p, "serving metrics")
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
	r.load(ctx, c, p, metricsAddr)
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
	return free[r.pick.IntN(len(free))]
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

// load runs the writers and watches as the cycle's schedule says, reads the server's checkpoint
// counts, then kills it; the writes in flight at the kill become pending.
func (r *crashRun) load(ctx context.Context, c historyv1.HistoryServiceClient, p *proc, metricsAddr string) {
	k := r.sched.next(r.cycles)
	r.t.Logf("cycle %d (sync=%s): %v", r.cycles, r.sync, k)
	var killed atomic.Bool
	var hold crashHold
	var wg sync.WaitGroup
	for _, w := range r.watches {
		wg.Go(func() { r.follow(w, &killed) })
	}
	inFlight := make([]*crashOp, len(r.writers))
	for i, w := range r.writers {
		wg.Go(func() { inFlight[i] = r.write(ctx, c, w, &killed, &hold) })
	}
	if k.kind == crashBurst {
		for range crashReaders {
			wg.Go(func() { r.read(ctx, c, &killed) })
		}
	}
	crashWait(k.load)
	if k.kind == crashPause {
		hold.hold()
		crashWait(k.pause)
		if k.after > 0 {
			hold.release()
			crashWait(k.after)
		}
	}
	m, err := readMetrics(metricsAddr)
	killed.Store(true)
	stop(r.t, p, syscall.SIGKILL, startTimeout)
	hold.release()
	wg.Wait()
	for _, op := range inFlight {
		if op != nil {
			r.pending = append(r.pending, op)
		}
	}
	if err != nil {
		r.fail("before the kill: %v", err)
		return
	}
	r.countCheckpoints(m, k)
}

// countCheckpoints adds the checkpoints a killed server had run, read from its
// historyd_store_checkpoint_seconds_count just before the kill (one that ran since is not counted).
func (r *crashRun) countCheckpoints(m series, k crashKill) {
	var counts []string
	for _, mode := range []string{"passive", "restart", "truncate"} {
		n, _ := m.get("historyd_store_checkpoint_seconds_count", `mode="`+mode+`"`)
		r.checkpoints[mode] += int(n)
		counts = append(counts, fmt.Sprintf("%s %d", mode, int(n)))
	}
	switch k.kind {
	case crashPause:
		r.pauses++
		if n, _ := m.get("historyd_store_checkpoint_seconds_count", `mode="truncate"`); n > 0 {
			r.pausesTruncated++
		}
	case crashBurst:
		r.bursts++
	}
	r.t.Logf("cycle %d (sync=%s): checkpoints before the kill: %s", r.cycles, r.sync, strings.Join(counts, ", "))
}

// write runs one writer until the kill, waiting while hold holds it, and returns its write in
// flight at the kill, or nil.
func (r *crashRun) write(ctx context.Context, c historyv1.HistoryServiceClient, w *crashWriter, killed *atomic.Bool, hold *crashHold) *crashOp {
	for !killed.Load() {
		hold.wait()
		if killed.Load() {
			return nil
		}
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

// read lists the shared branch over and over until the kill: readers that never pause keep the
// WAL from being reused, so that a burst's WAL grows to the writer's restarting checkpoint.
func (r *crashRun) read(ctx context.Context, c historyv1.HistoryServiceClient, killed *atomic.Bool) {
	for !killed.Load() {
		if _, err := c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: r.shared.id, PageSize: 1000, OmitRendered: true}); err != nil {
			if !killed.Load() {
				r.fail("ListMessages(%s), before the kill: %v", r.shared.name, err)
			}
			return
		}
	}
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
