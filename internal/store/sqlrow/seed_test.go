package sqlrow

import (
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

func instruction(t *testing.T, text string) *envelope.Message {
	t.Helper()
	c, err := store.CreateMessage(&store.Factory{Instruction: jsonv.StringValue(text)})
	if err != nil {
		t.Fatal(err)
	}
	return c.Message
}

// TestSeedPlacesAsAWrite: a seed keeps its row's count and next position
// through Place as it goes (a replacement, a system excluding another),
// and Finish hands over the full order with the ranks D3 gives.
func TestSeedPlacesAsAWrite(t *testing.T) {
	b, err := NewSeed(uuid.New(), nil, jsonv.ObjectValue())
	if err != nil {
		t.Fatal(err)
	}
	i1, i2, sys1, sys2 := instruction(t, "a"), instruction(t, "b"), envelope.NewSystem("one"), envelope.NewSystem("two")
	again := *i1 // i1 written again under its id
	for _, m := range []*envelope.Message{i1, sys1, i2, &again, sys2} {
		if err := b.Add(m, ""); err != nil {
			t.Fatal(err)
		}
	}
	c := b.Finish()
	row := c.Row
	if row.Count != 3 || row.NextPos != 2 || row.Head != 1 || row.SystemID == nil || *row.SystemID != sys2.ID {
		t.Fatalf("row: count %d, next pos %d, head %d, system %v; want 3, 2, 1, %s", row.Count, row.NextPos, row.Head, row.SystemID, sys2.ID)
	}
	want := []struct {
		msg       *envelope.Message
		pos, rank int64
	}{{sys2, -1, 4}, {&again, 0, 3}, {i2, 1, 2}}
	if len(c.ordered) != len(want) {
		t.Fatalf("%d rows, want %d", len(c.ordered), len(want))
	}
	for i, w := range want {
		if m := c.ordered[i]; m.Msg != w.msg || m.Pos != w.pos || m.Rank != w.rank || m.Seq != 1 {
			t.Errorf("row %d: pos %d rank %d seq %d (same message: %v), want pos %d rank %d seq 1", i, m.Pos, m.Rank, m.Seq, m.Msg == w.msg, w.pos, w.rank)
		}
		if c.Result.Messages[i].Message != w.msg {
			t.Errorf("result message %d is not row %d's", i, i)
		}
	}
	if row.NextRank != 5 {
		t.Errorf("next rank %d, want 5", row.NextRank)
	}
	if len(c.Kept.Messages) != 1 || c.Kept.Messages[0].Message != sys2 {
		t.Errorf("kept %d messages, want the system", len(c.Kept.Messages))
	}
	if ev := c.Commit[0]; ev.Sequence != 1 || ev.Kind != store.EventBranchCreated || len(ev.Messages) != 3 || ev.Branch.MessageCount != 3 {
		t.Errorf("BRANCH_CREATED: %+v", ev)
	}
}

// TestPlaceRenamesTheExcludedSystem: a new system takes the old one's
// place in the selected progression, in a copy.
func TestPlaceRenamesTheExcludedSystem(t *testing.T) {
	old, x := envelope.NewSystem("old"), uuid.New()
	sel := store.NewProgression([]uuid.UUID{x, old.ID}, nil)
	row := &Branch{SystemID: &old.ID, Selected: sel, Count: 2, NextPos: 1, NextRank: 2}
	sys := envelope.NewSystem("new")
	m := &Message{Msg: sys}
	Place(row, store.Placement{Message: sys, Excluded: old}, nil, m)
	if m.Pos != -1 || m.Rank != 2 || *row.SystemID != sys.ID || row.NextPos != 1 || row.NextRank != 3 || row.Count != 3 {
		t.Fatalf("placed at %d rank %d; row: system %s, next pos %d, next rank %d, count %d", m.Pos, m.Rank, row.SystemID, row.NextPos, row.NextRank, row.Count)
	}
	if got := row.Selected.Order; got[0] != x || got[1] != sys.ID {
		t.Errorf("selected %v, want [%s %s]", got, x, sys.ID)
	}
	if sel.Order[1] != old.ID {
		t.Error("the row's previous progression was changed in place")
	}
}
