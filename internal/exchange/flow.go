package exchange

import (
	"fmt"
	"slices"
	"sync"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// outboxName is the name of every flow's outbox progression (LionAGI's OUTBOX).
const outboxName = "outbox"

// inboxPrefix starts the name of every inbox progression: "inbox_<sender UUID>" (ADR-0006 D5:
// "Delivery creates an inbox_<sender UUID> progression on the recipient flow").
const inboxPrefix = "inbox_"

func inboxName(sender uuid.UUID) string { return inboxPrefix + sender.String() }

// entry is one message held in a progression.
type entry struct {
	msg *envelope.Message
	// seq is the message's insertion number in its flow: the order of LionAGI's items pile.
	seq uint64
	// recipientWasRegistered is set on outbox entries whose direct recipient was a registered
	// owner when the message was sent, so that a drop at collect says "recipient left" rather
	// than "unknown recipient".
	recipientWasRegistered bool
}

// progression is a named FIFO of entries: the outbox, or one sender's inbox.
type progression struct {
	name    string
	ord     int // its index in flow.progs, which never changes while the flow lives
	entries []entry
	head    int // entries[:head] were consumed
}

func (p *progression) len() int { return len(p.entries) - p.head }

func (p *progression) live() []entry { return p.entries[p.head:] }

func (p *progression) push(e entry) { p.entries = append(p.entries, e) }

// popFront removes and returns the oldest entry.
func (p *progression) popFront() (entry, bool) {
	if p.len() == 0 {
		return entry{}, false
	}
	e := p.entries[p.head]
	p.entries[p.head] = entry{} // let the message be collected
	p.head++
	if p.head == len(p.entries) {
		p.entries, p.head = p.entries[:0], 0
	} else if p.head > 1024 && p.head*2 > len(p.entries) {
		// Compact, so a long-lived inbox that is popped as fast as it fills stays small.
		n := copy(p.entries, p.entries[p.head:])
		clear(p.entries[n:])
		p.entries, p.head = p.entries[:n], 0
	}
	return e, true
}

// drain removes and returns every entry, oldest first.
func (p *progression) drain() []entry {
	out := slices.Clone(p.live())
	clear(p.entries)
	p.entries, p.head = p.entries[:0], 0
	return out
}

// flow is one owner's mailbox, LionAGI's Flow[Message, Progression]: an ordered set of named
// progressions (the outbox first, then inboxes in creation order) over the messages it holds.
type flow struct {
	name   string    // the owner's UUID text (LionAGI names the Flow str(owner_id))
	owner  uuid.UUID // the owner
	regSeq uint64    // registration order in the Exchange

	// collectMu orders the collects of this owner against each other (so one sender's messages
	// reach each inbox in outbox order) and against Unregister (so nothing a collect holds in
	// flight is lost when the owner leaves: Unregister waits for it). Never held while waiting for
	// another flow's collectMu.
	collectMu sync.Mutex

	// mu guards everything below. It is held only for queue operations, never while waiting for
	// anything else except, during a delivery, for nothing at all (subscriber sends do not block).
	mu      sync.Mutex
	closed  bool // set by Unregister: the flow takes nothing more
	progs   []*progression
	byName  map[string]*progression
	items   int    // messages held across all progressions
	nextSeq uint64 // insertion counter for entry.seq
	dead    deadLetters
	subs    map[*Subscription]struct{}
}

func newFlow(name string) *flow {
	return &flow{name: name, byName: map[string]*progression{}}
}

// newOwnerFlow is the flow Register creates: named for the owner, with an empty outbox.
func newOwnerFlow(owner uuid.UUID, regSeq uint64) *flow {
	f := newFlow(owner.String())
	f.owner, f.regSeq = owner, regSeq
	_, _ = f.addProgression(outboxName) // a new flow has no progression yet
	return f
}

// flowError carries LionAGI's exact text for a Flow error (vector "Flow basics") and unwraps to
// its sentinel.
type flowError struct {
	sentinel error
	text     string
}

func (e *flowError) Error() string { return e.text }

// Unwrap returns the sentinel.
func (e *flowError) Unwrap() error { return e.sentinel }

// addProgression adds an empty progression; a name in use is ErrProgressionExists with
// LionAGI's text (vector "Flow basics"). The caller holds f.mu (or owns f exclusively).
func (f *flow) addProgression(name string) (*progression, error) {
	if _, ok := f.byName[name]; ok {
		return nil, &flowError{ErrProgressionExists, fmt.Sprintf("Progression with name '%s' already exists.", name)}
	}
	p := &progression{name: name, ord: len(f.progs)}
	f.progs = append(f.progs, p)
	f.byName[name] = p
	return p, nil
}

// progression returns the named progression, or ErrProgressionNotFound with LionAGI's text.
func (f *flow) progression(name string) (*progression, error) {
	p, ok := f.byName[name]
	if !ok {
		return nil, &flowError{ErrProgressionNotFound, fmt.Sprintf("Progression '%s' not found in flow", name)}
	}
	return p, nil
}

// addItem appends m to the named progression; a missing progression is an error and adds nothing
// (vector "Flow basics").
func (f *flow) addItem(m *envelope.Message, prog string) error {
	p, err := f.progression(prog)
	if err != nil {
		return err
	}
	f.push(p, entry{msg: m})
	return nil
}

// push appends e to p, stamping its insertion number.
func (f *flow) push(p *progression, e entry) {
	f.nextSeq++
	e.seq = f.nextSeq
	p.push(e)
	f.items++
}

// inbox returns the inbox of sender, creating it on first delivery (ADR-0006 D5).
func (f *flow) inbox(sender uuid.UUID) *progression {
	name := inboxName(sender)
	if p, ok := f.byName[name]; ok {
		return p
	}
	p, _ := f.addProgression(name) // absent, checked above
	return p
}

// len is the number of messages the flow holds (LionAGI's len(flow)).
func (f *flow) len() int { return f.items }

// ProgressionView is one named progression of a flow: its message ids in order.
type ProgressionView struct {
	// Name is "outbox" or "inbox_<sender UUID>".
	Name string
	// IDs are the ids of the messages it holds, oldest first.
	IDs []uuid.UUID
}

// views returns every progression, in the flow's order, and the held message ids in insertion
// order (LionAGI's items pile). The caller holds f.mu.
func (f *flow) views() ([]ProgressionView, []uuid.UUID) {
	out := make([]ProgressionView, len(f.progs))
	var all []entry
	for i, p := range f.progs {
		ids := make([]uuid.UUID, 0, p.len())
		for _, e := range p.live() {
			ids = append(ids, e.msg.ID)
		}
		out[i] = ProgressionView{Name: p.name, IDs: ids}
		all = append(all, p.live()...)
	}
	slices.SortFunc(all, func(a, b entry) int { return cmpUint(a.seq, b.seq) })
	items := make([]uuid.UUID, len(all))
	for i, e := range all {
		items[i] = e.msg.ID
	}
	return out, items
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
