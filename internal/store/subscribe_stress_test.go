package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// seg is one subscription of a stress reader: what it asked for and what it got.
type seg struct {
	kinds     kindSet
	from      uint64 // cursor given
	got       []Commit
	end       uint64 // Last reported at the end (or heartbeat checks)
	hb        []uint64
	hbAfter   []int // len(got) when the heartbeat was taken
	endReason error
	closed    bool
}

// TestSubscribeLazyReplayStress checks the lazy replay (docs/decisions/0005) against a ground truth
// under load (docs/design.md#sequences: replay then live with no gap and no
// duplicate, whole commits; ADR-0006 D4): four writers add single-event and two-event commits and
// clear, with a tiny retention so replays are overtaken, or with the branch deleted while they
// write; twelve readers subscribe with random kinds filters, cursors and buffers, close some streams
// early and resume from each end's cursor (or from the oldest after HISTORY_COMPACTED). Every
// stretch a reader received must equal the ground truth's filtered commits over its (cursor, Last],
// and every CaughtUp head must have nothing pending at or below it. A live subscriber with a large
// buffer records the ground truth. The short random pauses vary the interleavings; nothing waits
// on them.
func TestSubscribeLazyReplayStress(t *testing.T) {
	for iter := 0; iter < 6; iter++ {
		t.Run(fmt.Sprint("retention", 37+iter), func(t *testing.T) { lazyReplayStress(t, int64(iter), 37+iter, false) })
		t.Run(fmt.Sprint("delete-while-writing-", iter), func(t *testing.T) { lazyReplayStress(t, int64(iter), 3000, true) })
	}
}

func lazyReplayStress(t *testing.T, seed int64, retention int, earlyDelete bool) {
	ctx := context.Background()
	m := NewMemory(WithEventRetention(retention), WithMemoryBudget(0), WithSubscriberBuffer(3))
	res, err := m.CreateBranch(ctx, CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	b := res.Branch.ID
	// The ground truth: room for every commit, in commits and in bytes, so it is never too slow.
	ref, err := m.Subscribe(ctx, b, SubscribeInput{Buffer: 1 << 16, BufferBytes: 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	var refCommits []Commit
	refDone := make(chan struct{})
	go func() {
		defer close(refDone)
		for {
			c, err := ref.Next(ctx)
			if err != nil {
				if !errors.Is(err, ErrBranchDeleted) {
					t.Errorf("ref ended: %v", err)
				}
				return
			}
			refCommits = append(refCommits, c)
		}
	}()
	kindChoices := []kindSet{allKinds, newKindSet([]EventKind{EventMessageAdded}), newKindSet([]EventKind{EventMessageReplaced}),
		newKindSet([]EventKind{EventMessagesCleared}), newKindSet([]EventKind{EventMessageReplaced, EventMessagesCleared})}
	var wg sync.WaitGroup
	const writers, readers, ops = 4, 12, 1500
	halfway := make(chan struct{}) // closed once the first writer is halfway through its writes
	var halfwayOnce sync.Once
	for w := 0; w < writers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(seed), uint64(w)))
			for i := 0; i < ops; i++ {
				if i == ops/2 {
					halfwayOnce.Do(func() { close(halfway) })
				}
				switch r.IntN(10) {
				case 0:
					m.ClearMessages(ctx, b, WriteOptions{})
				case 1, 2, 3:
					req, err := m.AddMessage(ctx, b, AddInput{Factory: Factory{ActionFunction: jsonv.StringValue("f"), ActionArguments: stressArguments}}, WriteOptions{})
					if err != nil {
						return
					}
					m.CreateActionResponse(ctx, b, ActionResponseInput{Request: req.Message.Message.ID, Output: jsonv.IntValue(1)}, WriteOptions{})
				default:
					if _, err := m.AddMessage(ctx, b, AddInput{Factory: Factory{Instruction: jsonv.StringValue("i")}}, WriteOptions{}); err != nil {
						return
					}
				}
				if r.IntN(50) == 0 {
					time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond)
				}
			}
		}(w)
	}
	segs := make([][]*seg, readers)
	var rwg sync.WaitGroup
	for rd := 0; rd < readers; rd++ {
		rwg.Add(1)
		go func(rd int) {
			defer rwg.Done()
			r := rand.New(rand.NewPCG(uint64(seed)+100, uint64(rd)))
			cursor := uint64(1)
			for {
				k := kindChoices[r.IntN(len(kindChoices))]
				var kinds []EventKind
				if k != allKinds {
					for e := EventBranchCreated; e < EventBranchDeleted; e++ {
						if k.has(e) {
							kinds = append(kinds, e)
						}
					}
				}
				c := cursor
				s, err := m.Subscribe(ctx, b, SubscribeInput{After: &c, Kinds: kinds, Buffer: 1 + r.IntN(4)})
				var se *SequenceError
				switch {
				case errors.Is(err, ErrHistoryCompacted) && errors.As(err, &se):
					cursor = se.Oldest - 1
					continue
				case errors.Is(err, ErrBranchNotFound):
					return
				case err != nil:
					t.Errorf("subscribe: %v", err)
					return
				}
				sg := &seg{kinds: k, from: c}
				segs[rd] = append(segs[rd], sg)
				closeAt := -1
				if r.IntN(4) == 0 {
					closeAt = r.IntN(100)
				}
				for {
					if len(sg.got) == closeAt {
						s.Close()
						sg.closed = true
					}
					cm, err := s.Next(ctx)
					if err != nil {
						sg.endReason = err
						if errors.As(err, &se) {
							sg.end = se.Last
							if se.Last < s.Last() {
								t.Errorf("Err.Last %d < Last %d", se.Last, s.Last())
							}
						}
						break
					}
					sg.got = append(sg.got, cm)
					if r.IntN(8) == 0 {
						if h, ok := s.CaughtUp(); ok {
							sg.hb = append(sg.hb, h)
							sg.hbAfter = append(sg.hbAfter, len(sg.got))
						}
					}
					if r.IntN(3) == 0 {
						time.Sleep(time.Duration(r.IntN(50)) * time.Microsecond)
					}
				}
				s.Close()
				switch {
				case errors.Is(sg.endReason, ErrBranchDeleted):
					return
				case errors.Is(sg.endReason, ErrSubscriberTooSlow):
					cursor = sg.end
				case errors.Is(sg.endReason, ErrSubscriptionClosed):
					cursor = s.Last()
					sg.end = s.Last()
				default:
					t.Errorf("end: %v", sg.endReason)
					return
				}
			}
		}(rd)
	}
	if earlyDelete {
		<-halfway // delete while the writers are still writing
	} else {
		wg.Wait()
	}
	if _, err := m.DeleteBranch(ctx, b, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	rwg.Wait()
	wg.Wait()
	<-refDone
	ref.Close()
	if n := m.subsOpen.Load(); n != 0 {
		t.Errorf("subsOpen = %d after every Close", n)
	}
	// Ground truth by sequence.
	bySeq := map[uint64]Commit{}
	var order []Commit
	for _, c := range refCommits {
		bySeq[c[0].CommitFirst] = c
		order = append(order, c)
	}
	expect := func(k kindSet, from, to uint64) []Commit {
		var out []Commit
		for _, c := range order {
			if c[len(c)-1].CommitLast <= from || c[0].CommitFirst > to {
				continue
			}
			// events after from only
			var cc Commit
			for _, ev := range c {
				if ev.Sequence > from && ev.Sequence <= to {
					cc = append(cc, ev)
				}
			}
			if f := k.filter(cc); f != nil {
				out = append(out, f)
			}
		}
		return out
	}
	nsegs, ncommits := 0, 0
	for rd := range segs {
		for i, sg := range segs[rd] {
			nsegs++
			ncommits += len(sg.got)
			to := sg.end
			if errors.Is(sg.endReason, ErrBranchDeleted) && !sg.closed {
				to = ^uint64(0)
			}
			want := expect(sg.kinds, sg.from, to)
			if len(want) != len(sg.got) {
				t.Errorf("reader %d seg %d (from %d to %d, kinds %b, end %v): got %d commits, want %d closed %v", rd, i, sg.from, sg.end, sg.kinds, sg.endReason, len(sg.got), len(want), sg.closed)
				continue
			}
			for j := range want {
				if fmt.Sprint(seqs(want[j])) != fmt.Sprint(seqs(sg.got[j])) {
					t.Errorf("reader %d seg %d commit %d: got %v want %v", rd, i, j, seqs(sg.got[j]), seqs(want[j]))
					break
				}
			}
			for h, head := range sg.hb {
				n := sg.hbAfter[h]
				lastDel := sg.from
				if n > 0 {
					lastDel = sg.got[n-1][0].CommitLast
				}
				if w := expect(sg.kinds, lastDel, head); len(w) != 0 {
					t.Errorf("reader %d seg %d: CaughtUp head %d with %v pending after %d", rd, i, head, seqs(w[0]), lastDel)
				}
			}
		}
	}
	t.Logf("seed %d: %d ref commits, %d segments, %d commits delivered", seed, len(order), nsegs, ncommits)
}

func seqs(c Commit) []uint64 {
	out := make([]uint64, len(c))
	for i, ev := range c {
		out[i] = ev.Sequence
	}
	return out
}

// stressArguments are the action requests' arguments.
var stressArguments = func() jsonv.Value {
	v, err := jsonv.ParseString(`{"x":1}`)
	if err != nil {
		panic(err)
	}
	return v
}()
