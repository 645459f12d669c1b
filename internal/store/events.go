package store

import (
	"math"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// EventKind names what a branch event did (docs/design.md#sequences).
type EventKind uint8

// The event kinds.
const (
	// EventBranchCreated is always sequence 1; it carries the initial
	// messages (of a create, import or fork).
	EventBranchCreated EventKind = iota + 1
	// EventMessageAdded appended a message.
	EventMessageAdded
	// EventMessageReplaced rewrote a message at its index.
	EventMessageReplaced
	// EventSystemSet wrote the system at index 0 (first, replacing, or in
	// place).
	EventSystemSet
	// EventMessagesCleared removed every message but the system.
	EventMessagesCleared
	// EventProgressionSet set or unset the selected progression.
	EventProgressionSet
	// EventBranchDeleted is the last event of a branch.
	EventBranchDeleted
)

// String returns the event kind's wire name.
func (k EventKind) String() string {
	switch k {
	case EventBranchCreated:
		return "BRANCH_CREATED"
	case EventMessageAdded:
		return "MESSAGE_ADDED"
	case EventMessageReplaced:
		return "MESSAGE_REPLACED"
	case EventSystemSet:
		return "SYSTEM_SET"
	case EventMessagesCleared:
		return "MESSAGES_CLEARED"
	case EventProgressionSet:
		return "PROGRESSION_SET"
	case EventBranchDeleted:
		return "BRANCH_DELETED"
	}
	return "EVENT_KIND_UNSPECIFIED"
}

// Event is one change to a branch. It carries the message as that event
// wrote it, not as it is now.
type Event struct {
	// Sequence is the event's per-branch sequence, strictly increasing by
	// one from 1.
	Sequence uint64
	// CommitFirst and CommitLast bound the sequences of the commit the
	// event belongs to (one event, or two for CreateActionResponse).
	CommitFirst, CommitLast uint64
	Kind                    EventKind
	// Message is the message written (MESSAGE_ADDED, MESSAGE_REPLACED,
	// SYSTEM_SET).
	Message *envelope.Message
	// Index is the message's position in the full order after the write;
	// -1 when the event wrote no message.
	Index int
	// Branch describes the branch (BRANCH_CREATED: as created).
	Branch *BranchInfo
	// Messages are the initial messages in order (BRANCH_CREATED).
	Messages []*envelope.Message
	// Progression is the selected progression set (PROGRESSION_SET); nil
	// when the event unset it.
	Progression []uuid.UUID
}

// Commit is the events of one write, in sequence order.
type Commit []Event

// DefaultEventRetention is how many events each branch's log keeps
// (docs/design.md#sequences: "default: the last 10,000 events").
const DefaultEventRetention = 10_000

// loggedEvent is an event as a commit hands it to the log: the event, the
// message versions it keeps alive and the bytes charged for the event
// itself.
type loggedEvent struct {
	ev       Event
	versions []*version
	size     int64
}

// logEntry is a retained event, kept small: the log holds one per write, up
// to the retention (10,000 by default) per branch, beside the message each
// one wrote, so a full Event (over 100 bytes, most of them for the rare
// kinds) per entry would cost about a tenth of a stored 1 KB message. The
// common event, one message written by a commit of at most a few events,
// is the version it wrote plus a few numbers; every other event keeps its
// fields in extra.
type logEntry struct {
	seq   uint64
	msg   *version     // the version a message event wrote; nil when extra holds the event
	extra *loggedEvent // an event that is not one message written; nil when msg holds it
	index int32        // Event.Index (a position in entries, which are int32)
	// toFirst and toLast are the distances from seq to CommitFirst and
	// CommitLast (a commit is one write: an event or a few).
	toFirst, toLast uint16
	kind            EventKind
}

// newLogEntry compacts e.
func newLogEntry(e loggedEvent) logEntry {
	ev := e.ev
	toFirst, toLast := ev.Sequence-ev.CommitFirst, ev.CommitLast-ev.Sequence
	compact := len(e.versions) == 1 && e.size == 0 && ev.Message == e.versions[0].msg &&
		ev.Branch == nil && ev.Messages == nil && ev.Progression == nil &&
		ev.Index >= math.MinInt32 && ev.Index <= math.MaxInt32 && toFirst <= math.MaxUint16 && toLast <= math.MaxUint16
	if !compact {
		x := e // a copy: taking e's address would move every call's e to the heap
		return logEntry{seq: ev.Sequence, extra: &x}
	}
	return logEntry{seq: ev.Sequence, msg: e.versions[0], index: int32(ev.Index), toFirst: uint16(toFirst), toLast: uint16(toLast), kind: ev.Kind}
}

// commitFirst returns the first sequence of the entry's commit.
func (e *logEntry) commitFirst() uint64 {
	if e.extra != nil {
		return e.extra.ev.CommitFirst
	}
	return e.seq - uint64(e.toFirst)
}

// event returns the event the entry holds.
func (e *logEntry) event() Event {
	if e.extra != nil {
		return e.extra.ev
	}
	return Event{
		Sequence: e.seq, CommitFirst: e.commitFirst(), CommitLast: e.seq + uint64(e.toLast),
		Kind: e.kind, Message: e.msg.msg, Index: int(e.index),
	}
}

// eventLog is a branch's bounded event log: a ring of the newest events.
type eventLog struct {
	buf   []logEntry
	start int // index of the oldest entry once the ring is full
	max   int
}

// len returns the number of retained events.
func (l *eventLog) len() int { return len(l.buf) }

// at returns the i-th oldest retained entry.
func (l *eventLog) at(i int) *logEntry { return &l.buf[(l.start+i)%len(l.buf)] }

// The ring is the Memory engine's Log (subscribe.go).
var _ Log = (*eventLog)(nil)

// Oldest returns the oldest retained sequence (Log).
func (l *eventLog) Oldest() uint64 { return l.oldest() }

// Last returns the newest retained sequence (Log).
func (l *eventLog) Last() uint64 { return l.last() }

// Frozen returns a copy of the ring (Log): after the delete it no longer
// changes, and discard only drops the branch's hold on it.
func (l *eventLog) Frozen() Log {
	cp := *l
	return &cp
}

// oldest returns the oldest retained sequence, 0 when the log is empty.
func (l *eventLog) oldest() uint64 {
	if len(l.buf) == 0 {
		return 0
	}
	return l.at(0).seq
}

// push appends e and returns the entry it evicted, if the ring was full.
func (l *eventLog) push(e logEntry) (evicted logEntry, ok bool) {
	if len(l.buf) < l.max {
		l.buf = append(l.buf, e)
		return logEntry{}, false
	}
	evicted = l.buf[l.start]
	l.buf[l.start] = e
	l.start = (l.start + 1) % len(l.buf)
	return evicted, true
}

// last returns the newest retained sequence, 0 when the log is empty.
func (l *eventLog) last() uint64 {
	if len(l.buf) == 0 {
		return 0
	}
	return l.at(len(l.buf) - 1).seq
}

// Chunk copies the retained events after after, grouped by commit, looking
// at n commits at most (Log); a commit that after cuts in the middle is
// resumed with its remaining events. Each commit goes through keep, and
// one it drops is passed over (it still counts towards n, so a filter
// does not stretch the copy). It returns the commits and the last sequence
// they cover, passed over or not: after when nothing follows it. The caller
// holds the branch lock and has checked that after+1 is retained.
func (l *eventLog) Chunk(after uint64, n int, keep func(Commit) Commit) (out []Commit, through uint64) {
	through = after
	first := 0
	// Sequences are contiguous, so the first wanted entry is found by
	// arithmetic, not by a scan.
	if o := l.oldest(); after >= o {
		first = int(after - o + 1)
	}
	end, commits := first, 0
	for end < len(l.buf) && commits < n {
		c := l.at(end).commitFirst()
		for end++; end < len(l.buf) && l.at(end).commitFirst() == c; end++ {
		}
		commits++
	}
	if end == first {
		return nil, through
	}
	evs := make([]Event, end-first) // one allocation for the chunk's events
	for i := range evs {
		evs[i] = l.at(first + i).event()
	}
	out = make([]Commit, 0, commits)
	for len(evs) > 0 {
		k := 1
		for k < len(evs) && evs[k].CommitFirst == evs[0].CommitFirst {
			k++
		}
		if c := keep(evs[:k:k]); c != nil {
			out = append(out, c)
		}
		evs = evs[k:]
	}
	return out, l.at(end - 1).seq
}
