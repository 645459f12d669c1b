//go:build e2e

package e2e

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// crashWatch follows one branch's event log through WatchBranch from sequence 0, across kills: it
// resumes from its cursor with the incarnation it was given, checks that each commit starts right
// after the cursor (no gap, no repeat), and rebuilds the branch's messages and events from what it
// was sent, to compare with the branch as the restarted server reads it. The checker uses a fresh
// one per branch to read the whole event log.
type crashWatch struct {
	name, id    string // the branch's model name and id
	incarnation string // from the first start frame
	cursor      uint64
	msgs        []wMsg
	events      map[uint64]mEvent
	deleted     bool // BRANCH_DELETED was received
	stream      historyv1.HistoryService_WatchBranchClient
}

// wMsg is a message as the stream's events wrote it.
type wMsg struct {
	id, cloneFrom string
	seq           uint64
}

// watchViolation is a stream that broke its order: lost (a gap) or duplicated (a repeat), in the
// harness's counts.
type watchViolation struct {
	duplicate bool
	msg       string
}

func (v *watchViolation) Error() string { return v.msg }

func newCrashWatch(b *mBranch) *crashWatch {
	return &crashWatch{name: b.name, id: b.id, events: map[uint64]mEvent{}}
}

// open starts the stream after the cursor (and, once known, with the incarnation) and reads its
// start frame, which gives the head the stream's replay ends at.
func (w *crashWatch) open(ctx context.Context, c historyv1.HistoryServiceClient) (*historyv1.WatchStart, error) {
	req := &historyv1.WatchBranchRequest{BranchId: w.id, AfterSequence: proto.Uint64(w.cursor)}
	if w.incarnation != "" {
		req.Incarnation = proto.String(w.incarnation)
	}
	s, err := c.WatchBranch(ctx, req)
	if err != nil {
		return nil, err
	}
	f, err := s.Recv()
	if err != nil {
		return nil, err
	}
	start := f.GetStart()
	if start == nil {
		return nil, fmt.Errorf("watch of %s: first frame %v, want start", w.name, f)
	}
	if w.incarnation != "" && start.GetIncarnation() != w.incarnation {
		return nil, fmt.Errorf("watch of %s: incarnation %s, want %s", w.name, start.GetIncarnation(), w.incarnation)
	}
	if start.GetAfterSequence() != w.cursor {
		return nil, fmt.Errorf("watch of %s: starts after %d, want the cursor %d", w.name, start.GetAfterSequence(), w.cursor)
	}
	w.incarnation, w.stream = start.GetIncarnation(), s
	return start, nil
}

// catchUp reads commits until the cursor reaches head.
func (w *crashWatch) catchUp(head uint64) error {
	for w.cursor < head && !w.deleted {
		f, err := w.stream.Recv()
		if err != nil {
			return fmt.Errorf("watch of %s ended at %d before the head %d: %w", w.name, w.cursor, head, err)
		}
		if err := w.frame(f); err != nil {
			return err
		}
	}
	return nil
}

// frame applies one frame: heartbeats carry nothing to check.
func (w *crashWatch) frame(f *historyv1.WatchBranchResponse) error {
	c := f.GetCommit()
	if c == nil {
		return nil
	}
	if c.GetFirstSequence() != w.cursor+1 {
		return &watchViolation{duplicate: c.GetFirstSequence() <= w.cursor,
			msg: fmt.Sprintf("watch of %s: commit %d..%d after cursor %d", w.name, c.GetFirstSequence(), c.GetLastSequence(), w.cursor)}
	}
	want := c.GetFirstSequence()
	for _, ev := range c.GetEvents() {
		if ev.GetSequence() != want {
			return &watchViolation{duplicate: ev.GetSequence() < want,
				msg: fmt.Sprintf("watch of %s: event %d in commit %d..%d, want %d", w.name, ev.GetSequence(), c.GetFirstSequence(), c.GetLastSequence(), want)}
		}
		want++
		if err := w.event(ev); err != nil {
			return err
		}
	}
	if want-1 != c.GetLastSequence() {
		return &watchViolation{msg: fmt.Sprintf("watch of %s: commit %d..%d carries events up to %d", w.name, c.GetFirstSequence(), c.GetLastSequence(), want-1)}
	}
	w.cursor = c.GetLastSequence()
	return nil
}

// event applies one event to the rebuilt branch.
func (w *crashWatch) event(ev *historyv1.BranchEvent) error {
	seq := ev.GetSequence()
	e := mEvent{kind: ev.GetKind(), msg: ev.GetMessage().GetId()}
	w.events[seq] = e
	switch ev.GetKind() {
	case historyv1.EventKind_EVENT_KIND_BRANCH_CREATED:
		w.msgs = w.msgs[:0]
		for _, m := range ev.GetMessages() {
			w.msgs = append(w.msgs, wMsgOf(m))
		}
	case historyv1.EventKind_EVENT_KIND_MESSAGE_ADDED, historyv1.EventKind_EVENT_KIND_MESSAGE_REPLACED:
		i := ev.GetIndex()
		switch {
		case ev.GetKind() == historyv1.EventKind_EVENT_KIND_MESSAGE_ADDED && i == uint64(len(w.msgs)):
			w.msgs = append(w.msgs, wMsgOf(ev.GetMessage()))
		case ev.GetKind() == historyv1.EventKind_EVENT_KIND_MESSAGE_REPLACED && i < uint64(len(w.msgs)):
			w.msgs[i] = wMsgOf(ev.GetMessage())
		default:
			return fmt.Errorf("watch of %s: event %d %s at index %d of %d messages", w.name, seq, ev.GetKind(), i, len(w.msgs))
		}
		if ev.GetMessage().GetSequence() != seq {
			return fmt.Errorf("watch of %s: event %d carries its message at sequence %d", w.name, seq, ev.GetMessage().GetSequence())
		}
	case historyv1.EventKind_EVENT_KIND_PROGRESSION_SET:
	case historyv1.EventKind_EVENT_KIND_BRANCH_DELETED:
		w.deleted = true
	default: // the harness never writes a system or clears a branch
		return fmt.Errorf("watch of %s: event %d of kind %s, which no write of the harness makes", w.name, seq, ev.GetKind())
	}
	return nil
}

func wMsgOf(m *historyv1.Message) wMsg {
	return wMsg{id: m.GetId(), cloneFrom: m.GetMetadata().GetFields()["clone_from"].GetStringValue(), seq: m.GetSequence()}
}

// agree reports how w's rebuilt branch differs from other's (the same branch read another way),
// or "".
func (w *crashWatch) agree(other *crashWatch) string {
	if len(w.msgs) != len(other.msgs) {
		return fmt.Sprintf("%d messages, the branch has %d", len(w.msgs), len(other.msgs))
	}
	for i := range w.msgs {
		if w.msgs[i] != other.msgs[i] {
			return fmt.Sprintf("index %d is %+v, the branch has %+v", i, w.msgs[i], other.msgs[i])
		}
	}
	if len(w.events) != len(other.events) {
		return fmt.Sprintf("%d events, the branch's log has %d", len(w.events), len(other.events))
	}
	for seq, e := range w.events {
		if other.events[seq] != e {
			return fmt.Sprintf("event %d is %v, the branch's log has %v", seq, e, other.events[seq])
		}
	}
	return ""
}
