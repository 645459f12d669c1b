package postgres

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
)

// Issue 16: "a write acknowledged by replica A is visible to every read on
// replica B right after the ack".
func TestReplicaReadsAfterAck(t *testing.T) {
	r := replicas(t, 2, nil)
	a, b := r[0], r[1]
	br := newBranch(t, a)
	for i := range 20 {
		res := add(t, a, br, msgText(i), store.WriteOptions{})
		got, err := b.GetMessage(tctx(t), br, res.Message.Message.ID)
		if err != nil {
			t.Fatalf("B reads message %d acked by A: %v", i, err)
		}
		if got.Head != res.Head {
			t.Fatalf("B's head %d after A acked head %d", got.Head, res.Head)
		}
		info, err := b.GetBranch(tctx(t), br)
		if err != nil || info.HeadSequence != res.Head || info.MessageCount != i+1 {
			t.Fatalf("B's branch after A's write %d: %+v, %v", i, info, err)
		}
	}
	if n := len(fullOrder(t, b, br)); n != 20 {
		t.Fatalf("B lists %d messages, want 20", n)
	}
}

// Issue 16: "WatchBranch on B delivers commits made through A in order,
// gap-free, promptly": the NOTIFY path alone (the sweep is an hour away).
func TestReplicaWatchByNotify(t *testing.T) {
	r := replicas(t, 2, func(c *Config) { c.SweepInterval = time.Hour })
	a, b := r[0], r[1]
	listening(t, a, b)
	br := newBranch(t, a)
	sub, err := b.Subscribe(tctx(t), br, store.SubscribeInput{After: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	expectCommits(t, sub, 0, 1, time.Second)
	for i := range 50 {
		add(t, a, br, msgText(i), store.WriteOptions{})
	}
	expectCommits(t, sub, 1, 51, time.Second)
	// One at a time too: each within a second of its ack.
	for i := range 5 {
		res := add(t, a, br, msgText(i), store.WriteOptions{})
		expectCommits(t, sub, res.Head-1, res.Head, time.Second)
	}
}

// Issue 16: "how a replica stays correct when a wake-up is lost": with
// every notification dropped, the sweep still delivers, in order.
func TestReplicaWatchBySweep(t *testing.T) {
	r := replicas(t, 2, func(c *Config) { c.SweepInterval = 50 * time.Millisecond })
	a, b := r[0], r[1]
	a.wake.drop.Store(true)
	b.wake.drop.Store(true)
	br := newBranch(t, a)
	sub, err := b.Subscribe(tctx(t), br, store.SubscribeInput{After: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	for i := range 30 {
		add(t, a, br, msgText(i), store.WriteOptions{})
	}
	expectCommits(t, sub, 0, 31, 2*time.Second)
	// A delete on A reaches B's subscriber as its last commit.
	if _, err := a.DeleteBranch(tctx(t), br, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectCommits(t, sub, 31, 32, 2*time.Second)
	if _, err := sub.Next(tctx(t)); !errorsIs(err, store.ErrBranchDeleted) {
		t.Fatalf("after BRANCH_DELETED: %v, want ErrBranchDeleted", err)
	}
}

// Issue 16: "the same request_id sent to A and to B at the same moment
// writes once" (a branch write, and a create in a principal's scope).
func TestReplicaSameRequestIDWritesOnce(t *testing.T) {
	r := replicas(t, 2, nil)
	br := newBranch(t, r[0])
	for round := range 10 {
		id := msgText(round)
		var (
			wg  sync.WaitGroup
			res [2]store.WriteResult
			crs [2]store.BranchResult
			err [4]error
		)
		for i, s := range r {
			wg.Add(2)
			go func() {
				defer wg.Done()
				res[i], err[i] = s.AddMessage(tctx(t), br, store.AddInput{Factory: addFactory(id)}, store.WriteOptions{RequestID: id})
			}()
			go func() {
				defer wg.Done()
				crs[i], err[2+i] = s.CreateBranch(tctx(t), store.CreateBranchInput{Principal: "p", RequestID: id})
			}()
		}
		wg.Wait()
		for _, e := range err {
			if e != nil {
				t.Fatal(e)
			}
		}
		if res[0].Replayed == res[1].Replayed || res[0].Message.Message.ID != res[1].Message.Message.ID || res[0].Head != res[1].Head {
			t.Fatalf("round %d: the two answers %+v and %+v are not one write and its replay", round, res[0], res[1])
		}
		if crs[0].Replayed == crs[1].Replayed || crs[0].Branch.ID != crs[1].Branch.ID {
			t.Fatalf("round %d: two creates with one request id made %s and %s", round, crs[0].Branch.ID, crs[1].Branch.ID)
		}
	}
	if n := len(fullOrder(t, r[1], br)); n != 10 {
		t.Fatalf("%d messages after 10 request ids sent twice each, want 10", n)
	}
	page, err := r[0].ListBranches(tctx(t), 100, "")
	if err != nil || len(page.Branches) != 11 {
		t.Fatalf("%d branches after 10 creates sent twice each (and one more), want 11: %v", len(page.Branches), err)
	}
}

// Issue 16: "concurrent writers on different replicas keep per-branch
// sequences gap-free": 4 writers on A and 4 on B, every acknowledged
// message at its own index.
func TestReplicaConcurrentWriters(t *testing.T) {
	r := replicas(t, 2, nil)
	br := newBranch(t, r[0])
	const perWriter = 25
	var (
		mu    sync.Mutex
		acked []store.WriteResult
		wg    sync.WaitGroup
	)
	for w := range 8 {
		s := r[w%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perWriter {
				res, err := s.AddMessage(tctx(t), br, store.AddInput{Factory: addFactory(msgText(w*1000 + i))}, store.WriteOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, res)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	checkAcked(t, r[1], br, acked, 1)
}

// checkAcked checks that the acked writes hold every sequence after
// created once, and that each message is at the index its ack named.
func checkAcked(t testing.TB, s *Store, br uuid.UUID, acked []store.WriteResult, created uint64) {
	t.Helper()
	seen := map[uint64]bool{}
	for _, res := range acked {
		if seen[res.Head] {
			t.Fatalf("head %d acked twice", res.Head)
		}
		seen[res.Head] = true
	}
	for seq := created + 1; seq <= created+uint64(len(acked)); seq++ {
		if !seen[seq] {
			t.Fatalf("no acked write has sequence %d: a gap", seq)
		}
	}
	order := fullOrder(t, s, br)
	for _, res := range acked {
		if res.Index >= len(order) || order[res.Index].Message.ID != res.Message.Message.ID {
			t.Fatalf("message %s acked at index %d is not there", res.Message.Message.ID, res.Index)
		}
	}
}

// Issue 16: "the incarnation is the database's: a watcher moves from A to
// B with its cursor".
func TestReplicaCursorMovesAcross(t *testing.T) {
	r := replicas(t, 2, nil)
	a, b := r[0], r[1]
	listening(t, a, b)
	br := newBranch(t, a)
	for i := range 10 {
		add(t, a, br, msgText(i), store.WriteOptions{})
	}
	sa, err := a.Subscribe(tctx(t), br, store.SubscribeInput{After: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	expectCommits(t, sa, 0, 6, time.Second)
	inc, cursor := sa.Incarnation, sa.Last()
	sa.Close()
	last := add(t, a, br, "after the move", store.WriteOptions{}).Head
	sb, err := b.Subscribe(tctx(t), br, store.SubscribeInput{After: &cursor, Incarnation: &inc})
	if err != nil {
		t.Fatalf("B refuses A's cursor %d of incarnation %s: %v", cursor, inc, err)
	}
	defer sb.Close()
	expectCommits(t, sb, cursor, last, time.Second)
}
