package storetest

import (
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
)

// Concurrency: issue 4 acceptance, 8 writers x 1000 adds.
const (
	writers       = 8
	addsPerWriter = 1000
)

// testConcurrentOneBranch: 8 writers x 1000 adds on one branch (with
// readers listing meanwhile): every add lands once, at a unique index,
// with gap-free sequences, and the order is the sequence order.
func testConcurrentOneBranch(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	b := newBranch(t, st)
	results := make([][]store.WriteResult, writers)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var readers sync.WaitGroup
	for range 2 {
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := st.ListMessages(ctx(t), b, store.ListInput{PageSize: 100, Descending: true}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range addsPerWriter {
				res, err := st.AddMessage(ctx(t), b, store.AddInput{Factory: store.Factory{Instruction: text(fmt.Sprintf("%d/%d", w, i))}}, store.WriteOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				results[w] = append(results[w], res)
			}
		}()
	}
	wg.Wait()
	close(stop)
	readers.Wait()

	total := writers * addsPerWriter
	seqs := make([]uint64, 0, total)
	indices := map[int]bool{}
	bySeq := map[uint64]uuid.UUID{}
	for _, rs := range results {
		for _, r := range rs {
			if indices[r.Index] {
				t.Fatalf("index %d written twice", r.Index)
			}
			indices[r.Index] = true
			seqs = append(seqs, r.Message.Sequence)
			bySeq[r.Message.Sequence] = r.Message.Message.ID
		}
	}
	if len(seqs) != total {
		t.Fatalf("%d adds returned, want %d", len(seqs), total)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i, s := range seqs {
		if s != uint64(i+2) { // 1 is BRANCH_CREATED
			t.Fatalf("sequences not gap-free: position %d has %d", i, s)
		}
	}
	got := order(t, st, b)
	if len(got) != total {
		t.Fatalf("branch holds %d messages, want %d (lost writes)", len(got), total)
	}
	for i, id := range got {
		if bySeq[uint64(i+2)] != id {
			t.Fatalf("position %d holds %s, want the message of sequence %d", i, id, i+2)
		}
	}
	if h := head(t, st, b); h != uint64(total+1) {
		t.Errorf("head %d, want %d", h, total+1)
	}
}

// testConcurrentManyBranches: 8 writers x 1000 adds, each writer on its
// own branch, plus branch creation: nothing is lost, each branch's
// sequences are gap-free.
func testConcurrentManyBranches(t *testing.T, newStore Factory) {
	st := newStore(t, Options{})
	branches := make([]uuid.UUID, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := st.CreateBranch(ctx(t), store.CreateBranchInput{})
			if err != nil {
				t.Error(err)
				return
			}
			branches[w] = res.Branch.ID
			for i := range addsPerWriter {
				r, err := st.AddMessage(ctx(t), res.Branch.ID, store.AddInput{Factory: store.Factory{Instruction: text(fmt.Sprint(i))}}, store.WriteOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				if r.Message.Sequence != uint64(i+2) || r.Index != i {
					t.Errorf("branch %d add %d: sequence %d index %d", w, i, r.Message.Sequence, r.Index)
					return
				}
			}
		}()
	}
	wg.Wait()
	page, err := st.ListBranches(ctx(t), store.MaxPageSize, "")
	if err != nil || len(page.Branches) != writers {
		t.Fatalf("%d branches listed, %v", len(page.Branches), err)
	}
	for _, b := range branches {
		if n := len(order(t, st, b)); n != addsPerWriter {
			t.Errorf("branch %s holds %d messages, want %d", b, n, addsPerWriter)
		}
		if h := head(t, st, b); h != addsPerWriter+1 {
			t.Errorf("branch %s head %d", b, h)
		}
	}
}
