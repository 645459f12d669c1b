package sqlite

import (
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/storetest"
)

// An event carries the message as that event wrote it, not as it is now
// (store.Event), though this engine stores a message once: the version an
// event reads from messages is copied into the event before it is
// rewritten (a replace, a new system), cleared or deleted.
func TestEventsKeepTheVersionTheyWrote(t *testing.T) {
	s := newTestStore(t, storetest.Options{})
	ctx := tctx(t)
	res, err := s.CreateBranch(ctx, store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Branch.ID
	add := func(in store.AddInput) store.WriteResult {
		t.Helper()
		w, err := s.AddMessage(ctx, id, in, store.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	first := add(store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue("v1")}})                                        // seq 2
	add(store.AddInput{Target: &first.Message.Message.ID, Factory: store.Factory{Guidance: jsonv.StringValue("v2")}})                 // seq 3
	sys1, err := s.AddMessage(ctx, id, store.AddInput{Factory: store.Factory{System: jsonv.StringValue("s1")}}, store.WriteOptions{}) // seq 4
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddMessage(ctx, id, store.AddInput{Factory: store.Factory{System: jsonv.StringValue("s2")}}, store.WriteOptions{}); err != nil { // seq 5: excludes s1
		t.Fatal(err)
	}
	if _, err := s.ClearMessages(ctx, id, store.WriteOptions{}); err != nil { // seq 6
		t.Fatal(err)
	}
	zero := uint64(0)
	sub, err := s.Subscribe(ctx, id, store.SubscribeInput{After: &zero})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	want := map[uint64]string{2: `"v1"`, 3: `"v2"`, 4: `"s1"`, 5: `"s2"`}
	for seq := uint64(1); seq <= 6; {
		c, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range c {
			if w, ok := want[ev.Sequence]; ok {
				if ev.Message == nil {
					t.Fatalf("event %d (%v) has no message", ev.Sequence, ev.Kind)
				}
				got := string(jsonv.Marshal(ev.Message.Content.Dict()))
				if !strings.Contains(got, w) {
					t.Errorf("event %d carries %s, want the version it wrote (%s)", ev.Sequence, got, w)
				}
			}
			seq = ev.Sequence + 1
		}
	}
	if sys1.Message.Message.ID == first.Message.Message.ID {
		t.Fatal("test setup: one id for two messages")
	}
}
