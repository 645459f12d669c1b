//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// Issue 16 acceptance: "`make e2e` (PostgreSQL answering, as in CI) starts 3 replicas on one
// database, writers on two, watchers on the third, and prints `replicas: 3, W writes, K watchers,
// 0 gaps, 0 duplicates, 0 lost`", for "Replicas behave as one server": "a write acknowledged by
// replica A is visible to every read on replica B right after the ack"; "WatchBranch on B delivers
// commits made through A in order, gap-free"; "the same request_id sent to A and to B at the same
// moment writes once; concurrent writers on different replicas keep per-branch sequences gap-free".

const (
	replicaBranches    = 4
	replicaWritersEach = 2 // on each of the two writing replicas; every writer writes every branch
	replicaWatchersPer = 3 // per branch, on the third replica: two open before the writes, one opened halfway
	replicaLoad        = 3 * time.Second
	replicaSameID      = 10 // request ids sent to both writing replicas at once
	replicaMaxErrors   = 20 // errors described; a writer stops at its fifth
)

// TestReplicas: 3 replicas on one schema. Writers on A and B (AddMessage with request ids,
// ActionRequests answered by CreateActionResponse) append concurrently to the same branches, and
// read each acknowledged write back on the other replica right after the ack; watchers on C watch
// every branch from sequence 0. Then every watcher must have received every acknowledged write's
// event at the sequence it was acknowledged with, in order: no gap, no repeat, nothing lost.
func TestReplicas(t *testing.T) {
	noLeaks(t)
	url := pgtest.New(t)
	ps := startReplicas(t, url, 3)
	a, b, c := historyClient(t, ps[0]), historyClient(t, ps[1]), historyClient(t, ps[2])
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()

	acks := &replicaAcks{branches: map[string]map[uint64]string{}}
	var branches []string
	for i := range replicaBranches {
		rid := fmt.Sprintf("branch-%d", i)
		resp, err := []historyv1.HistoryServiceClient{a, b}[i%2].CreateBranch(ctx, &historyv1.CreateBranchRequest{RequestId: rid, Name: proto.String(rid)})
		if err != nil {
			t.Fatalf("CreateBranch %s: %v", rid, err)
		}
		id := resp.GetBranch().GetId()
		branches = append(branches, id)
		if err := acks.ack(id, resp.GetBranch().GetHeadSequence(), ""); err != nil {
			t.Fatal(err)
		}
	}

	var watching sync.WaitGroup
	defer watching.Wait() // after stopWatching: deferred calls run last first
	watchCtx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	progress := make(chan struct{}, 1)
	var watchers []*replicaWatcher
	watch := func(branch string) {
		w := &replicaWatcher{branch: branch, seen: map[uint64]string{}}
		s, err := c.WatchBranch(watchCtx, &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: proto.Uint64(0)})
		if err != nil {
			t.Fatalf("WatchBranch(%s) on the third replica: %v", branch, err)
		}
		watchers = append(watchers, w)
		watching.Go(func() { w.run(s, progress) })
	}
	for _, br := range branches {
		for range replicaWatchersPer - 1 {
			watch(br)
		}
	}

	seed := rand.Uint64()
	stop := make(chan struct{})
	var writing sync.WaitGroup
	stopWriters := sync.OnceFunc(func() {
		close(stop)
		writing.Wait()
	})
	defer stopWriters() // on a t.Fatalf during the load
	var writers []*replicaWriter
	for i := range 2 * replicaWritersEach {
		own, other := a, b
		if i%2 == 1 {
			own, other = b, a
		}
		w := &replicaWriter{id: i, own: own, other: other, branches: branches, acks: acks, rng: rand.New(rand.NewPCG(seed, uint64(i)))}
		writers = append(writers, w)
		writing.Go(func() { w.run(ctx, stop) })
	}
	crashWait(replicaLoad / 2) // the load's length, not a synchronisation
	for _, br := range branches {
		watch(br) // replays what is there, then follows live: the seam crosses replicas
	}
	crashWait(replicaLoad / 2)
	stopWriters()
	var errs []string
	reads := 0
	for _, w := range writers {
		errs = append(errs, w.errs...)
		reads += w.reads
	}
	for _, e := range errs[:min(len(errs), replicaMaxErrors)] {
		t.Error(e)
	}
	if len(errs) > 0 {
		t.Fatalf("%d writes or reads failed (seed %d)", len(errs), seed)
	}
	sameIDAtOnce(ctx, t, a, b, branches, acks)

	heads := acks.heads()
	if ended := waitWatchers(watchers, heads, progress); len(ended) > 0 {
		for _, e := range ended {
			t.Error(e)
		}
	}
	stopWatching()
	watching.Wait()

	gaps, dups, lost := 0, 0, 0
	for _, w := range watchers {
		g, d, l := w.compare(acks.branches[w.branch])
		gaps, dups, lost = gaps+g, dups+d, lost+l
	}
	fmt.Printf("replicas: 3, %d writes, %d watchers, %d gaps, %d duplicates, %d lost\n", acks.writes, len(watchers), gaps, dups, lost)
	t.Logf("%d acknowledged writes read back on the other writing replica right after their ack; heads %v; seed %d", reads, slices.Sorted(maps.Values(heads)), seed)
	if gaps+dups+lost != 0 {
		for _, w := range watchers {
			if d := w.describe(acks.branches[w.branch]); d != "" {
				t.Error(d)
			}
		}
		t.Fatalf("the watchers on the third replica saw %d gaps, %d duplicates, %d lost", gaps, dups, lost)
	}
	if acks.writes == 0 || len(watchers) == 0 || reads == 0 {
		t.Fatalf("%d writes, %d watchers, %d reads back: nothing was tested", acks.writes, len(watchers), reads)
	}
	stopReplicas(t, ps...)
}

// replicaAcks is what the replicas acknowledged: per branch, the message each acknowledged write's
// event carries ("" for BRANCH_CREATED) by the sequence it was acknowledged at.
type replicaAcks struct {
	mu       sync.Mutex
	branches map[string]map[uint64]string
	writes   int // acknowledged RPCs
}

// ack records one event of an acknowledged write; two writes acknowledged at one sequence of a
// branch is an error (replicas that do not agree on the branch's sequence).
func (a *replicaAcks) ack(branch string, seq uint64, msg string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	events := a.branches[branch]
	if events == nil {
		events = map[uint64]string{}
		a.branches[branch] = events
		a.writes++ // the create
	}
	if prev, ok := events[seq]; ok {
		return fmt.Errorf("branch %s: sequence %d acknowledged for message %q and for %q", branch, seq, prev, msg)
	}
	events[seq] = msg
	return nil
}

// wrote counts an acknowledged RPC other than a create.
func (a *replicaAcks) wrote() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.writes++
}

// heads returns each branch's highest acknowledged sequence.
func (a *replicaAcks) heads() map[string]uint64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]uint64{}
	for b, events := range a.branches {
		out[b] = slices.Max(slices.Collect(maps.Keys(events)))
	}
	return out
}

// replicaWriter writes on one replica and reads each ack back on the other.
type replicaWriter struct {
	id         int
	own, other historyv1.HistoryServiceClient
	branches   []string
	acks       *replicaAcks
	rng        *rand.Rand
	n          int      // request ids issued
	reads      int      // acks read back on the other replica
	errs       []string // read by the test once run has returned
}

// run writes until stop is closed (or five errors).
func (w *replicaWriter) run(ctx context.Context, stop <-chan struct{}) {
	for len(w.errs) < 5 {
		select {
		case <-stop:
			return
		default:
		}
		if err := w.step(ctx); err != nil {
			w.errs = append(w.errs, fmt.Sprintf("writer %d: %v", w.id, err))
		}
	}
}

// step makes one write on a random branch: an Instruction (4 in 5), or an ActionRequest and its
// CreateActionResponse (two events in one commit).
func (w *replicaWriter) step(ctx context.Context) error {
	branch := w.branches[w.rng.IntN(len(w.branches))]
	w.n++
	rid := fmt.Sprintf("r%d-%d", w.id, w.n)
	req := instruction(branch, rid, rid)
	action := w.rng.IntN(5) == 0
	if action {
		req.Input = &historyv1.AddMessageRequest_ActionRequest{ActionRequest: &historyv1.ActionRequestInput{Function: "f", ArgumentsJson: "{}"}}
	}
	resp, err := w.own.AddMessage(ctx, req)
	if err != nil {
		return fmt.Errorf("AddMessage %s: %w", rid, err)
	}
	m := resp.GetMessage()
	if err := w.ack(ctx, branch, m); err != nil || !action {
		return err
	}
	ar, err := w.own.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{
		BranchId: branch, RequestId: rid + "-response", ActionRequestId: m.GetId(), OutputJson: proto.String(`"ok"`)})
	if err != nil {
		return fmt.Errorf("CreateActionResponse %s-response: %w", rid, err)
	}
	if err := w.acks.ack(branch, ar.GetActionRequest().GetSequence(), ar.GetActionRequest().GetId()); err != nil {
		return err
	}
	return w.ack(ctx, branch, ar.GetActionResponse())
}

// ack records an acknowledged message write and reads it back on the other replica: issue 16 "a
// write acknowledged by replica A is visible to every read on replica B right after the ack".
func (w *replicaWriter) ack(ctx context.Context, branch string, m *historyv1.Message) error {
	w.acks.wrote()
	if err := w.acks.ack(branch, m.GetSequence(), m.GetId()); err != nil {
		return err
	}
	got, err := w.other.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: branch, MessageId: m.GetId(), OmitRendered: true})
	if err != nil {
		return fmt.Errorf("message %s, acknowledged at sequence %d, read on the other replica right after the ack: %w", m.GetId(), m.GetSequence(), err)
	}
	if got.GetMessage().GetSequence() < m.GetSequence() {
		return fmt.Errorf("message %s, acknowledged at sequence %d, read on the other replica at %d", m.GetId(), m.GetSequence(), got.GetMessage().GetSequence())
	}
	br, err := w.other.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: branch})
	if err != nil {
		return fmt.Errorf("GetBranch on the other replica after an ack: %w", err)
	}
	if br.GetBranch().GetHeadSequence() < m.GetSequence() {
		return fmt.Errorf("branch %s: head %d on the other replica right after an ack at sequence %d", branch, br.GetBranch().GetHeadSequence(), m.GetSequence())
	}
	w.reads++
	return nil
}

// sameIDAtOnce sends each of replicaSameID AddMessages to both writing replicas at the same moment,
// with one request id: issue 16 "the same request_id sent to A and to B at the same moment writes
// once". Both must answer with the one message (a replica that answered with a retryable error is
// asked again, as a client would); the watchers then show whether a second copy was written.
func sameIDAtOnce(ctx context.Context, t *testing.T, a, b historyv1.HistoryServiceClient, branches []string, acks *replicaAcks) {
	t.Helper()
	for i := range replicaSameID {
		branch, rid := branches[i%len(branches)], fmt.Sprintf("same-%d", i)
		var resps [2]*historyv1.AddMessageResponse
		var errs [2]error
		start := make(chan struct{})
		var wg sync.WaitGroup
		for j, c := range []historyv1.HistoryServiceClient{a, b} {
			wg.Go(func() {
				<-start
				resps[j], errs[j] = c.AddMessage(ctx, instruction(branch, rid, rid))
			})
		}
		close(start)
		wg.Wait()
		for j, c := range []historyv1.HistoryServiceClient{a, b} {
			if errs[j] != nil {
				t.Logf("%s on replica %c: %v; asked again", rid, 'A'+j, errs[j])
				resps[j], errs[j] = c.AddMessage(ctx, instruction(branch, rid, rid))
			}
			if errs[j] != nil {
				t.Fatalf("%s on replica %c: %v", rid, 'A'+j, errs[j])
			}
		}
		m0, m1 := resps[0].GetMessage(), resps[1].GetMessage()
		if m0.GetId() != m1.GetId() || m0.GetSequence() != m1.GetSequence() || resps[0].GetIndex() != resps[1].GetIndex() {
			t.Errorf("%s sent to both replicas at once: message %s (sequence %d, index %d) and %s (sequence %d, index %d): written twice",
				rid, m0.GetId(), m0.GetSequence(), resps[0].GetIndex(), m1.GetId(), m1.GetSequence(), resps[1].GetIndex())
		}
		acks.wrote()
		if err := acks.ack(branch, m0.GetSequence(), m0.GetId()); err != nil {
			t.Error(err)
		}
	}
}
