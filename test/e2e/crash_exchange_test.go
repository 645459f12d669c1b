//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
)

// Issue 17: "Conservation everywhere, kept as a ledger per (message, recipient): each delivery of
// an acknowledged Send is, at any moment and after any crash, in exactly one state: in the
// sender's outbox, in the recipient's inbox, handed out by exactly one PopMessage (Receive is a
// peek and hands nothing out), returned by Unregister, a dead letter with its reason, or evicted
// by a bound and counted. [...] sqlite: the crash harness extended with Send / Collect / Receive /
// Pop / Unregister traffic, kill -9 cycles (at least 20 in make e2e), the ledger checked after
// each restart." Acceptance: "`make e2e` prints for sqlite `exchange crash: N cycles, S sent, 0
// lost, 0 duplicated` with N >= 20".
//
// A cycle: read the ledger the killed server left, from a copy of its data directory, through the
// sqlite engine and exchangedb (crash_exchange_ledger_test.go), and hold it to what the clients
// saw (crash_exchange_log_test.go, crash_exchange_check_test.go); start historyd on the data
// directory (--sync normal and full in turn); hold its answers (owners, queued and inbox counts,
// Receive, ListDeadLetters) to that ledger; retry, with the same request id, each Send that was
// in flight at the kill, which acknowledges it once, and check that every message in the ledger
// is an acknowledged Send's; then a worker per owner (crash_exchange_ops_test.go) sends, collects,
// receives, pops, unregisters and registers again as TestCrash's schedule says
// (crash_schedule_test.go: its kills land in a steady load, in a pause or in a burst) until
// historyd is killed with SIGKILL. A last restart checks the last kill.
//
// Issue 18 adds acknowledged delivery: "At-least-once across crashes ...: after kill -9 (sqlite)
// ... a leased, unacknowledged message is delivered again after its deadline, with its attempt
// count", and "The crash harness's ledger gains the leased state". So each worker also leases its
// owner's messages (Lease) and acknowledges, nacks, extends or gives up its leases, some after a
// kill; one owner also has a leasing SubscribeInbox competing with its worker
// (crash_exchange_stream_test.go); owners register with max_attempts 3 and a short visibility
// timeout, so that leases given up expire, come back with their next attempt, and end as dead
// letters of the recipient (reason max attempts). The checker holds the leased and acked states
// to what the clients saw: each attempt handed out once, each message acknowledged at most once
// and then never popped, returned or handed out again.
//
// The server runs with small bounds (exCrashFlags) so that the inbox bound makes dead letters and
// the dead-letter bound evicts: every state of the ledger occurs.
//
// HISTORYD_CRASH_SEED and HISTORYD_CRASH_CYCLES are TestCrash's: make crash runs both harnesses
// at 200 cycles, make e2e at crashDefaultCycles.

const (
	exCrashOwners = 4
	exCrashMode   = 2 // the random streams' mode number: TestCrash's sync modes are 0 and 1
	// exCrashBudget bounds the first crashDefaultCycles cycles, which make e2e runs (the brief:
	// well under 2 minutes).
	exCrashBudget = 90 * time.Second
)

// exCrashFlags are the server's Exchange bounds in the harness: an inbox of 6 per sender and 4
// dead letters per owner, so that inboxes fill (dead letters, reason inbox full) and the
// dead-letter bound evicts.
var exCrashFlags = []string{"--exchange-max-inbox", "6", "--exchange-max-dead-letters", "4"}

func TestCrashExchange(t *testing.T) {
	seed := crashSeed(t)
	cycles := crashDefaultCycles
	if s := os.Getenv(crashCyclesEnv); s != "" {
		var err error
		if cycles, err = strconv.Atoi(s); err != nil || cycles < 1 {
			t.Fatalf("%s=%q: want a positive number of cycles", crashCyclesEnv, s)
		}
	}
	r := newExRun(t, seed, cycles)
	r.run(t.TempDir())
}

// exRun is the harness's run: the owners, their workers, the clients' log and the violations.
type exRun struct {
	t        *testing.T
	seed     uint64
	planned  int
	sched    *crashSchedule
	owners   []string
	stranger string // a UUID no one registers: Sends to it are dead letters
	workers  []*exWorker
	log      *exLog
	pending  []*exOp // Sends in flight at the last kill: retried after the restart
	// streamRng draws the leasing receiver's choices (crash_exchange_stream_test.go).
	streamRng *rand.Rand

	mu         sync.Mutex
	cycles     int
	retried    int // Sends retried after a kill
	replayed   int // of them, those the killed server had committed (in its ledger)
	syncs      map[string]int
	states     map[exchange.LedgerState]int // entries seen by state, over every check
	maxDead    int                          // entries dead or evicted with reason max attempts, over every check
	lost       int
	duplicated int
	details    []string
	failed     bool
	// Effects of calls whose answers a kill swallowed, in the last ledger: popped entries no
	// client saw, returned entries no Unregister response showed, messages routed with no report,
	// acked entries no Ack answered.
	poppedUnseen, returnedUnseen, routedUnseen, ackedUnseen int
}

func newExRun(t *testing.T, seed uint64, cycles int) *exRun {
	r := &exRun{
		t: t, seed: seed, planned: cycles, sched: newCrashSchedule(seed, exCrashMode, cycles), log: newExLog(),
		syncs: map[string]int{}, states: map[exchange.LedgerState]int{},
	}
	pick := rand.New(rand.NewPCG(seed, crashStream(exCrashMode, crashWatchStream)))
	for range exCrashOwners {
		r.owners = append(r.owners, uuidFrom(pick))
	}
	r.stranger = uuidFrom(pick)
	for i, o := range r.owners {
		r.workers = append(r.workers, &exWorker{
			id: i, owner: o, log: r.log, rng: rand.New(rand.NewPCG(seed, crashStream(exCrashMode, crashWriterStream+i))),
		})
	}
	r.workers[exCrashStreamOwner].stream = make(chan struct{}, 1)
	r.streamRng = rand.New(rand.NewPCG(seed, crashStream(exCrashMode, crashWriterStream+exCrashOwners)))
	return r
}

// run runs the cycles on dir, then a last restart and check, and prints the line.
func (r *exRun) run(dir string) {
	begin := time.Now()
	var budgeted time.Duration
	defer func() { // also after a t.Fatal
		lg := r.log
		lg.mu.Lock()
		sent, collects, pops, receives, unregisters := len(lg.sends), lg.collectsAcked, lg.popsAcked, lg.receivesAcked, lg.unregistersAcked
		leased, acked, nacked, extended, stale := lg.leasesAcked, lg.acksAcked, lg.nacksAcked, lg.extendsAcked, lg.staleAcked
		lg.mu.Unlock()
		fmt.Printf("exchange crash: %d cycles, %d sent, %d lost, %d duplicated, %d leased, %d acked\n", r.cycles, sent, r.lost, r.duplicated, leased, acked)
		fmt.Printf("exchange crash harness: %.1fs (seed=%d, sync normal %d and full %d restarts); acknowledged %d collects, %d pops, "+
			"%d receives, %d unregisters, %d leases handed out, %d Acks, %d Nacks, %d ExtendLeases, %d refused as stale; %d Sends "+
			"retried after kills, %d of them committed before; in flight at kills and in the last ledger with no client: %d popped, "+
			"%d returned, %d routed, %d acked; ledger entries by state, summed over the checks: %v (%d of them max-attempts dead letters)\n",
			time.Since(begin).Seconds(), r.seed, r.syncs["normal"], r.syncs["full"], collects, pops, receives,
			unregisters, leased, acked, nacked, extended, stale, r.retried, r.replayed, r.poppedUnseen, r.returnedUnseen, r.routedUnseen,
			r.ackedUnseen, r.states, r.maxDead)
		for _, d := range r.details {
			r.t.Error(d)
		}
		if n := r.lost + r.duplicated; n > len(r.details) {
			r.t.Errorf("... and %d more violations", n-len(r.details))
		}
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

// covered fails a run whose checks could have passed without testing each outcome, or whose first
// crashDefaultCycles cycles took longer than make e2e's budget.
func (r *exRun) covered(budgeted time.Duration) {
	if budgeted > exCrashBudget {
		r.t.Errorf("make e2e runs %d cycles within %v; they took %v (seed=%d)", min(r.planned, crashDefaultCycles), exCrashBudget, budgeted.Round(time.Millisecond), r.seed)
	}
	if r.cycles < crashMinCycles || r.failed {
		return
	}
	if r.retried == 0 || r.replayed == 0 {
		r.t.Errorf("%d cycles: %d Sends in flight at kills, %d of them committed before the kill: a Send acknowledged only by its retry was not tested", r.cycles, r.retried, r.replayed)
	}
	for _, s := range []exchange.LedgerState{exchange.LedgerOutbox, exchange.LedgerInbox, exchange.LedgerPopped,
		exchange.LedgerReturned, exchange.LedgerDead, exchange.LedgerEvicted, exchange.LedgerLeased, exchange.LedgerAcked} {
		if r.states[s] == 0 {
			r.t.Errorf("%d cycles and no ledger entry %s at any check: that state was not tested after a kill", r.cycles, s)
		}
	}
	if r.maxDead == 0 {
		r.t.Errorf("%d cycles and no max-attempts dead letter in the ledger at any check: leases ending at max_attempts were not tested", r.cycles)
	}
}

// violate counts a violation in *count and describes it.
func (r *exRun) violate(count *int, format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	*count++
	r.failed = true
	if len(r.details) < crashMaxDetails {
		r.details = append(r.details, fmt.Sprintf("cycle %d (seed=%d): ", r.cycles, r.seed)+fmt.Sprintf(format, args...))
	}
}

// fail reports an error that is no violation of conservation but leaves the log unsure.
func (r *exRun) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
	r.t.Errorf("cycle %d (seed=%d): %s", r.cycles, r.seed, fmt.Sprintf(format, args...))
}

// problems turns what the workers found in responses into violations.
func (r *exRun) problems() {
	r.log.mu.Lock()
	ps := r.log.problems
	r.log.problems = nil
	r.log.mu.Unlock()
	for _, p := range ps {
		if p.duplicated {
			r.violate(&r.duplicated, "%s", p.what)
		} else {
			r.violate(&r.lost, "%s", p.what)
		}
	}
}

// cycle checks the ledger the last kill left (none before the first start), restarts historyd on
// dir, checks it and resolves the Sends in flight, then (kill) loads it and kills it, or stops it.
func (r *exRun) cycle(dir string, kill bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()
	var l *exLedger
	if r.cycles > 0 {
		entries, err := readSQLiteLedger(ctx, r.t, dir)
		if err != nil {
			r.t.Fatalf("cycle %d (seed=%d): reading the ledger the killed server left: %v", r.cycles, r.seed, err)
		}
		l = r.indexLedger(entries)
		r.checkLedger(l)
	}
	sync := []string{"normal", "full"}[r.cycles%2]
	r.syncs[sync]++
	p := startSQLite(r.t, dir, append([]string{"--sync", sync}, exCrashFlags...)...)
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close()
	c := historyv1.NewExchangeServiceClient(conn)

	if l == nil {
		for _, w := range r.workers {
			if _, err := c.Register(ctx, registerRequest(w.owner)); err != nil {
				r.t.Fatalf("Register %s: %v", w.owner, err)
			}
			w.registered = true
		}
	} else {
		registered := r.checkServer(ctx, c, l)
		for _, w := range r.workers {
			w.registered = registered[w.owner]
		}
		r.retry(ctx, c, l)
		r.checkUnknown(l)
	}
	r.problems()
	if !kill || r.failed {
		stop(r.t, p, syscall.SIGTERM, startTimeout)
		return
	}
	r.load(ctx, c, p)
	r.problems()
}

// retry sends again each Send that was in flight at the kill, with its request id: committed or
// not, it is acknowledged now, once. One the ledger already held was committed before the kill.
func (r *exRun) retry(ctx context.Context, c historyv1.ExchangeServiceClient, l *exLedger) {
	for _, op := range r.pending {
		resp, err := op.call(ctx, c)
		if err != nil {
			r.fail("retrying %s after the restart: %v", op.desc, err)
			continue
		}
		r.retried++
		if l.ids[resp.(*historyv1.SendResponse).GetMessage().GetId()] {
			r.replayed++
		}
		if err := op.apply(resp); err != nil {
			r.fail("retried %s: %v", op.desc, err)
		}
	}
	r.pending = nil
}

// load runs the workers as the cycle's schedule says, then kills historyd; the Sends in flight
// become pending, the other calls in flight are counted as unseen.
func (r *exRun) load(ctx context.Context, c historyv1.ExchangeServiceClient, p *proc) {
	k := r.sched.next(r.cycles)
	r.t.Logf("cycle %d: %v", r.cycles, k)
	var killed atomic.Bool
	stopped := make(chan struct{}) // closed with killed set: wakes the leasing receiver's wait
	var hold crashHold
	var wg sync.WaitGroup
	inFlight := make([]*exOp, len(r.workers))
	for i, w := range r.workers {
		others := slices.DeleteFunc(slices.Clone(r.owners), func(o string) bool { return o == w.owner })
		wg.Go(func() { inFlight[i] = r.work(ctx, c, w, others, &killed, &hold) })
	}
	wg.Go(func() { r.receiveLeased(ctx, c, r.workers[exCrashStreamOwner], r.streamRng, &killed, stopped, &hold) })
	crashWait(k.load)
	if k.kind == crashPause {
		hold.hold()
		crashWait(k.pause)
		if k.after > 0 {
			hold.release()
			crashWait(k.after)
		}
	}
	killed.Store(true)
	close(stopped)
	stop(r.t, p, syscall.SIGKILL, startTimeout)
	hold.release()
	wg.Wait()
	for _, op := range inFlight {
		switch {
		case op == nil:
		case op.send:
			r.pending = append(r.pending, op)
		case op.killed != nil:
			op.killed()
		}
	}
}

// work runs one worker until the kill and returns its call in flight at the kill, or nil.
func (r *exRun) work(ctx context.Context, c historyv1.ExchangeServiceClient, w *exWorker, others []string, killed *atomic.Bool, hold *crashHold) *exOp {
	for !killed.Load() {
		hold.wait()
		if killed.Load() {
			return nil
		}
		op := w.next(others, r.stranger)
		resp, err := op.call(ctx, c)
		if err != nil {
			if killed.Load() {
				return op
			}
			r.fail("%s, before the kill: %v", op.desc, err)
			return nil
		}
		if err := op.apply(resp); err != nil {
			r.fail("%s: %v", op.desc, err)
			return nil
		}
	}
	return nil
}
