package store

import (
	"reflect"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// TestLogEntryKeepsTheEvent: the log keeps a compact entry per event (issue 8: resident memory
// per stored 1 KB message at most 2.5 KB), and every event read back from it, by Chunk or
// Frozen, must be the one recorded, whichever form the entry took; and the entry must hold the
// versions and charged bytes its eviction gives back.
func TestLogEntryKeepsTheEvent(t *testing.T) {
	msg := envelope.NewSystem("S")
	v := &version{msg: msg}
	info := &BranchInfo{ID: uuid.New()}
	cases := []struct {
		name    string
		e       loggedEvent
		compact bool
	}{
		{"a message added, alone in its commit",
			loggedEvent{ev: Event{Sequence: 7, CommitFirst: 7, CommitLast: 7, Kind: EventMessageAdded, Message: msg, Index: 3}, versions: []*version{v}}, true},
		{"the second of a commit of three",
			loggedEvent{ev: Event{Sequence: 8, CommitFirst: 7, CommitLast: 9, Kind: EventMessageReplaced, Message: msg, Index: 0}, versions: []*version{v}}, true},
		{"branch created",
			loggedEvent{ev: Event{Sequence: 1, CommitFirst: 1, CommitLast: 1, Kind: EventBranchCreated, Index: -1, Branch: info, Messages: []*envelope.Message{msg}}, versions: []*version{v}}, false},
		{"messages cleared, charged for itself",
			loggedEvent{ev: Event{Sequence: 4, CommitFirst: 4, CommitLast: 4, Kind: EventMessagesCleared, Index: -1}, size: eventOverhead}, false},
		{"progression set",
			loggedEvent{ev: Event{Sequence: 5, CommitFirst: 5, CommitLast: 5, Kind: EventProgressionSet, Index: -1, Progression: []uuid.UUID{msg.ID}}, size: eventOverhead + 16}, false},
		{"a commit too long for the compact bounds",
			loggedEvent{ev: Event{Sequence: 70_000, CommitFirst: 1, CommitLast: 70_000, Kind: EventMessageAdded, Message: msg, Index: 2}, versions: []*version{v}}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newLogEntry(c.e)
			if got := e.extra == nil; got != c.compact {
				t.Errorf("compact = %v, want %v", got, c.compact)
			}
			if got := e.event(); !reflect.DeepEqual(got, c.e.ev) {
				t.Errorf("event() = %+v, want %+v", got, c.e.ev)
			}
			if got := e.commitFirst(); got != c.e.ev.CommitFirst {
				t.Errorf("commitFirst() = %d, want %d", got, c.e.ev.CommitFirst)
			}
			m := NewMemory(WithMemoryBudget(0))
			m.budget.used.Add(c.e.size)
			for _, hv := range c.e.versions {
				hv.refs.Store(1)
				hv.size = 100
				m.budget.used.Add(hv.size)
			}
			m.drop(&e)
			if used := m.MemoryUsed(); used != 0 {
				t.Errorf("after drop the store holds %d bytes, want 0", used)
			}
		})
	}
}
