package store

import (
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// version is one stored write of a message. The branch state holds the
// current version of each message, the event log holds the version each
// retained event wrote, and a remembered response holds the versions it
// carries; refs counts those holders, and the version's bytes go back to
// the budget when the last one lets go. A version never changes once
// made (its message is immutable; an import sets the ranks before the
// branch is visible), so it may be read without the branch lock.
type version struct {
	msg *envelope.Message
	seq uint64 // the sequence of the write
	// rank orders the Pile's collections as LionAGI's dict does (issue 13
	// item 1): a message gets the branch's next rank when it is inserted
	// or re-inserted (add_message of a present message excludes and
	// inserts it; set_system inserts the new System), and keeps it when
	// changed in place (an ActionRequest linked to its response). Export
	// writes collections by rank, the progression in conversation order.
	// It lives here, not in a map of the branch, as the version is the
	// one thing per message the branch holds anyway.
	rank uint64
	size int64
	pos  int32 // index in branch.entries; -1 for the system
	refs atomic.Int32
}

func (v *version) stored() StoredMessage { return StoredMessage{Message: v.msg, Sequence: v.seq} }

// elementID is the identity of a non-message Element the branch exports
// (its Pile and the Pile's progression), kept so that export after import
// gives the same ids back.
type elementID struct {
	id        uuid.UUID
	createdAt float64
}

// branch is one branch's state. The system sits in its own slot (index 0
// of the full order); the other messages are entries, in insertion order,
// and a replaced message keeps its entry. entries and the view lists only
// grow until a clear, which starts a new epoch, so a page token can name a
// position in them.
type branch struct {
	mu sync.RWMutex

	id          uuid.UUID
	incarnation uuid.UUID
	createdAt   float64
	metadata    jsonv.Value
	name, user  *string
	parent      *uuid.UUID
	forkPoint   *uuid.UUID
	pile, prog  elementID
	charge      int64 // bytes charged for the branch itself

	deleted bool
	head    uint64

	system   *version
	msgs     map[uuid.UUID]*version
	nextRank uint64 // the rank (version.rank) of the next message inserted
	entries  []uuid.UUID
	views    [numViews][]int32 // positions into entries, per view (ViewAll unused)
	epoch    uint64            // incremented by every clear

	selected *Progression // the selected progression; nil when unset
	selEpoch uint64       // incremented by every change of selected

	log       eventLog
	feed      *Feed // its subscriptions, over mu and log
	observers []observerEntry
	nextObs   uint64
}

func newBranch(m *Memory, id uuid.UUID, createdAt float64) *branch {
	b := &branch{
		id:          id,
		incarnation: uuid.New(),
		createdAt:   createdAt,
		metadata:    jsonv.ObjectValue(),
		pile:        elementID{uuid.New(), createdAt},
		prog:        elementID{uuid.New(), createdAt},
		msgs:        map[uuid.UUID]*version{},
		log:         eventLog{max: m.opts.retention},
	}
	b.feed = NewFeed(&b.mu, &b.log)
	return b
}

// count returns the number of messages, the system included.
func (b *branch) count() int { return len(b.msgs) }

// index returns the position of v in the full order.
func (b *branch) index(v *version) int {
	if v.pos < 0 {
		return 0
	}
	if b.system != nil {
		return int(v.pos) + 1
	}
	return int(v.pos)
}

// info describes the branch.
func (b *branch) info() BranchInfo {
	in := BranchInfo{
		ID: b.id, Incarnation: b.incarnation, CreatedAt: b.createdAt, Metadata: b.metadata,
		Name: b.name, User: b.user, ParentBranchID: b.parent, ForkPoint: b.forkPoint,
		HeadSequence: b.head, MessageCount: b.count(), Selected: b.selected != nil,
	}
	if b.system != nil {
		id := b.system.msg.ID
		in.SystemID = &id
	}
	return in
}

// order returns the full order: the system, then the entries.
func (b *branch) order() []uuid.UUID {
	out := make([]uuid.UUID, 0, len(b.msgs))
	if b.system != nil {
		out = append(out, b.system.msg.ID)
	}
	return append(out, b.entries...)
}

// get returns the current version of a message.
func (b *branch) get(id uuid.UUID) (*version, bool) {
	v, ok := b.msgs[id]
	return v, ok
}

// versions returns the current versions of ids, which are all members.
func (b *branch) versions(ids []uuid.UUID) []*version {
	vs := make([]*version, len(ids))
	for i, id := range ids {
		vs[i] = b.msgs[id]
	}
	return vs
}

// The branch is the rules' BranchState (rules.go), read under its lock.
var _ BranchState = (*branch)(nil)

// BranchID returns the branch's id (BranchState).
func (b *branch) BranchID() uuid.UUID { return b.id }

// HeadSequence returns the branch's head (BranchState).
func (b *branch) HeadSequence() uint64 { return b.head }

// Current returns the current message with id (BranchState).
func (b *branch) Current(id uuid.UUID) (*envelope.Message, bool, error) {
	v, ok := b.msgs[id]
	if !ok {
		return nil, false, nil
	}
	return v.msg, true, nil
}

// CurrentSystem returns the system (BranchState).
func (b *branch) CurrentSystem() (*envelope.Message, error) {
	if b.system == nil {
		return nil, nil
	}
	return b.system.msg, nil
}

// apply performs a planned placement at sequence seq and returns the new
// version (held by the state and by the event that wrote it). The caller
// has reserved its bytes.
func (m *Memory) apply(b *branch, p Placement, seq uint64, size int64) *version {
	msg := p.Message
	v := &version{msg: msg, seq: seq, size: size}
	v.refs.Store(1)
	var old *version
	if p.Replaces {
		old = b.msgs[msg.ID]
	}
	switch {
	case msg.Kind() == envelope.KindSystem:
		v.pos = -1
		if p.Excluded != nil {
			excluded := b.msgs[p.Excluded.ID]
			delete(b.msgs, p.Excluded.ID)
			if b.selected != nil {
				for i, id := range b.selected.Order {
					if id == p.Excluded.ID {
						b.selected.Order[i] = msg.ID
					}
				}
			}
			m.unref(excluded)
		}
		if old != nil {
			m.unref(old)
		}
		b.system = v
	case old != nil:
		v.pos = old.pos
		m.unref(old)
	default:
		v.pos = int32(len(b.entries))
		b.entries = append(b.entries, msg.ID)
		for _, view := range viewsOf(msg.Kind()) {
			b.views[view] = append(b.views[view], v.pos)
		}
	}
	if prior, ranked := b.msgs[msg.ID]; p.NewRank(ranked) {
		v.rank = b.nextRank
		b.nextRank++
	} else {
		v.rank = prior.rank
	}
	b.msgs[msg.ID] = v
	return v
}

// unref drops one holder of v and releases its bytes with the last.
func (m *Memory) unref(v *version) { m.budget.unref(v) }

// record appends a commit's events to the log (each holding its versions),
// releases what the ring evicts, and publishes the commit to the branch's
// subscribers. It returns the head sequence.
func (m *Memory) record(b *branch, entries []loggedEvent) uint64 {
	first, last := entries[0].ev.Sequence, entries[len(entries)-1].ev.Sequence
	commit := make(Commit, len(entries))
	for i := range entries {
		entries[i].ev.CommitFirst, entries[i].ev.CommitLast = first, last
		for _, v := range entries[i].versions {
			v.refs.Add(1)
		}
		if evicted, ok := b.log.push(newLogEntry(entries[i])); ok {
			m.drop(&evicted)
		}
		commit[i] = entries[i].ev
	}
	b.head = last
	b.feed.Publish(commit)
	return b.head
}

// drop lets go of what a log entry holds: its versions and the bytes of
// the event itself.
func (m *Memory) drop(e *logEntry) {
	if e.msg != nil {
		m.unref(e.msg)
		return
	}
	for _, v := range e.extra.versions {
		m.unref(v)
	}
	m.budget.release(e.extra.size)
}
