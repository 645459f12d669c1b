package main

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// The generated database of the start-time row (issue 14: "a database of 1M messages") is one the
// engine reads: the copies follow the schema the migrations made (a column added to branches,
// messages or events is copied too), every copied branch lists its messages, and the store counts
// them all.
func TestGenerateDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	n, last, err := generate(ctx, dir, 200, 5) // 10 seed branches of 5, copied 3 times
	if err != nil {
		t.Fatal(err)
	}
	if n != 200 {
		t.Fatalf("generated %d messages, want 200", n)
	}
	st, err := sqlite.OpenStore(ctx, sqlite.StoreConfig{Config: sqlite.Config{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if got := st.Stats(); got.Branches != 40 || got.Messages != 240 { // each branch has its system too
		t.Errorf("Stats = %d branches, %d messages; want 40 and 240", got.Branches, got.Messages)
	}
	id, err := uuid.Parse(last)
	if err != nil {
		t.Fatal(err)
	}
	page, err := st.ListMessages(ctx, id, store.ListInput{PageSize: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 6 {
		t.Errorf("a copied branch lists %d messages, want 6", len(page.Messages))
	}
	// The copy's event log replays as its seed's does (every branch is made alike), every message
	// event with its message (the engine may keep a message once, in messages, and have the event
	// read it there).
	branches, err := st.ListBranches(ctx, 100, "")
	if err != nil {
		t.Fatal(err)
	}
	replay := func(id uuid.UUID) (events, messages int) {
		after := uint64(0)
		sub, err := st.Subscribe(ctx, id, store.SubscribeInput{After: &after})
		if err != nil {
			t.Fatalf("subscribing to %s (its event log): %v", id, err)
		}
		defer sub.Close()
		for _, c := range sub.Replay() {
			for _, e := range c {
				events++
				if e.Message != nil {
					messages++
				}
			}
		}
		return events, messages
	}
	ce, cm := replay(id)
	if cm < 5 {
		t.Errorf("a copied branch's event log replays %d messages, want at least its 5 instructions", cm)
	}
	for _, b := range branches.Branches {
		if e, m := replay(b.ID); e != ce || m != cm {
			t.Errorf("branch %s replays %d events, %d with a message; the copy %s replays %d, %d", b.ID, e, m, id, ce, cm)
		}
	}
}
