package exchange

import (
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// outboxName is the name of every flow's outbox progression (LionAGI's OUTBOX).
const outboxName = "outbox"

// inboxPrefix starts the name of every inbox progression: "inbox_<sender UUID>" (ADR-0006 D5:
// "Delivery creates an inbox_<sender UUID> progression on the recipient flow").
const inboxPrefix = "inbox_"

func inboxName(sender uuid.UUID) string { return inboxPrefix + sender.String() }

// compactProgressionsAfter is the number of reclaimed inboxes a flow may carry as tombstones before
// it considers compacting its progression list (it compacts once they are also more than half of
// it).
const compactProgressionsAfter = 32

// entry is one message held in a progression. It has the shape it had before leases, four words
// and four fields with the message the only pointer (TestEntryFourWords), so that owners that
// never lease pay nothing for the lease state packed into it: not an allocation (Collect's batch
// of one message fits the stack buffer Go gives a small make), not GC scanning or write barriers,
// and not the instructions that each more field costs when an entry is passed in registers (a
// first version with seven fields cost every Pop about 90 more, measured with callgrind).
type entry struct {
	msg *envelope.Message
	// seq is the message's insertion number in its flow: the order of LionAGI's items pile, and
	// increasing within each progression.
	seq uint64
	// visibleAt is when a leased inbox entry is visible again, in Unix nanoseconds of the
	// Exchange's clock: its lease's deadline or the end of a Nack's delay (lease_memory.go).
	visibleAt int64
	// meta packs, low bits first: the size (32 bits), the lease attempts (16) and the flags
	// (entryHeld, entryRecipientWasRegistered, entryPrevHeld). Read and written through the
	// methods below.
	meta uint64
}

// The layout of entry.meta.
const (
	entryAttemptsShift = 32
	// entryHeld is set while a lease holds an inbox entry: by Lease, until Ack, Nack or another
	// taker (lease.go), even past visibleAt.
	entryHeld uint64 = 1 << 48
	// entryRecipientWasRegistered is set on outbox entries whose direct recipient was a
	// registered owner when the message was sent, so that a drop at collect says "recipient
	// left" rather than "unknown recipient".
	entryRecipientWasRegistered uint64 = 1 << 49
	// entryPrevHeld is set by a Lease that took an inbox entry still held by the lease before
	// (past its deadline, taken by no one else): a Release of the new lease, which gives it back as
	// if never taken, makes the one before held again (lease_memory.go).
	entryPrevHeld uint64 = 1 << 50
)

// MaxMaxAttempts must fit entry.meta's 16 bits of attempts: this fails to compile otherwise.
var _ [math.MaxUint16 - MaxMaxAttempts]struct{}

// newEntry is an entry of m with size budget bytes (entrySize: at most math.MaxInt32), never
// leased.
func newEntry(m *envelope.Message, size int64, recipientWasRegistered bool) entry {
	e := entry{msg: m, meta: uint64(uint32(size))}
	if recipientWasRegistered {
		e.meta |= entryRecipientWasRegistered
	}
	return e
}

// delivered is the inbox entry Collect makes of outbox entry e: its message and size, no flags.
func (e *entry) delivered() entry { return entry{msg: e.msg, meta: uint64(uint32(e.meta))} }

// bytes is the message's estimated heap bytes, charged to the Exchange's budget while the entry
// is held (budget.go).
func (e *entry) bytes() int64 { return int64(uint32(e.meta)) }

// attempts counts the leases of an inbox entry, the current one included; 0 for one never leased
// (its visibleAt and held are then zero).
func (e *entry) attempts() int { return int(uint16(e.meta >> entryAttemptsShift)) }

// setAttempts sets attempts to n (0..MaxMaxAttempts).
func (e *entry) setAttempts(n int) {
	e.meta = e.meta&^(math.MaxUint16<<entryAttemptsShift) | uint64(uint16(n))<<entryAttemptsShift
}

// held reports whether a lease holds the entry.
func (e *entry) held() bool { return e.meta&entryHeld != 0 }

// setHeld sets or clears held.
func (e *entry) setHeld(on bool) { e.setFlag(entryHeld, on) }

// setFlag sets or clears one of meta's flags.
func (e *entry) setFlag(flag uint64, on bool) {
	if on {
		e.meta |= flag
	} else {
		e.meta &^= flag
	}
}

// prevHeld reports entryPrevHeld.
func (e *entry) prevHeld() bool { return e.meta&entryPrevHeld != 0 }

// setPrevHeld sets or clears entryPrevHeld.
func (e *entry) setPrevHeld(on bool) { e.setFlag(entryPrevHeld, on) }

// recipientWasRegistered reports entryRecipientWasRegistered.
func (e *entry) recipientWasRegistered() bool { return e.meta&entryRecipientWasRegistered != 0 }

// entrySize is the budget bytes of m as an entry holds them: messageBytes, held within
// math.MaxInt32 (2 GiB, far above the server's receive limit; a larger in-process message is
// charged 2 GiB, consistently, from Send to its last release).
func entrySize(m *envelope.Message) int64 { return min(messageBytes(m), math.MaxInt32) }

// progression is a named FIFO of entries: the outbox, or one sender's inbox.
type progression struct {
	name string
	// ord numbers the flow's progressions in creation order and is never reused, so it stays a
	// valid position (a Receive cursor) when inboxes before it are reclaimed.
	ord     uint64
	sender  uuid.UUID // the sender, for an inbox
	inbox   bool      // an inbox_<sender> progression
	removed bool      // reclaimed: a tombstone in flow.progs until the next compaction
	// leased counts the entries of q ever leased (attempts > 0): 0 means every entry is
	// visible, so Pop, Receive and Lease take their lease-free paths. An int32 beside the flags,
	// so that the struct keeps the size it had before leases (2^31 entries are far beyond memory).
	leased int32
	q      queue[entry]
}

func (p *progression) len() int { return p.q.len() }

// live returns the entries, oldest first (see queue.live).
func (p *progression) live() []entry { return p.q.live() }

// flow is one owner's mailbox, LionAGI's Flow[Message, Progression]: an ordered set of named
// progressions (the outbox first, then inboxes in creation order) over the messages it holds.
//
// Lock order, outermost first: collectMu, then mu, then the registry's lock. A goroutine holds at
// most one flow's mu at a time.
type flow struct {
	owner  uuid.UUID // the owner
	regSeq uint64    // registration number in the Exchange
	// removedAt is the registry generation at which the owner was unregistered, 0 while it is
	// registered (registry.go).
	removedAt atomic.Uint64
	// dirty is set by the first Send after a background collection pass took the owner, so that
	// later Sends need not tell the collector again (background.go).
	dirty atomic.Bool

	// collectMu orders the collects of this owner against each other (so one sender's messages
	// reach each inbox in outbox order) and against its Unregister (so nothing a collect holds in
	// flight is lost when the owner leaves: Unregister waits for it). Never held while waiting for
	// another flow's collectMu.
	collectMu sync.Mutex
	// recipients are the owners this owner's collects delivered to, so that its Unregister can
	// reclaim its inboxes there once they are empty. Guarded by collectMu; pruned of owners that
	// are no longer registered when it doubles.
	recipients       map[uuid.UUID]struct{}
	recipientsPruned int // its size after the last pruning

	// mu guards everything below. It is held for queue operations and for the non-blocking hand-off
	// to subscribers, never while waiting for another flow's lock.
	mu     sync.Mutex
	closed bool // set by Unregister: the flow takes nothing more
	// progs are the progressions in creation order, reclaimed inboxes included as tombstones
	// until a compaction; byName indexes the live ones.
	progs   []*progression
	byName  map[string]*progression
	dropped int    // tombstones in progs
	nextOrd uint64 // the ord of the next progression
	items   int    // messages held across all progressions
	nextSeq uint64 // insertion counter for entry.seq
	bytes   int64  // the budget bytes of what the flow holds: entries and dead letters
	dead    deadLetters
	subs    map[*Subscription]struct{}

	// settings are the owner's lease settings, resolved at Register and never changed (so read
	// without mu).
	settings OwnerSettings
	// leased counts the inbox entries with a lease state across progressions (their
	// progression.leased summed): 0 keeps every call on its lease-free path.
	leased int
	// dueAt is no later than the deadline of every lease at the owner's MaxAttempts, the leases
	// whose end makes a dead letter, in Unix nanoseconds (0: there is none), so the calls that
	// must notice such an end (expireLeases) skip the walk until it may have come.
	dueAt int64
}

// newOwnerFlow is the flow Register creates for owner, with an empty outbox and its resolved lease
// settings.
func newOwnerFlow(owner uuid.UUID, regSeq uint64, settings OwnerSettings) *flow {
	f := &flow{owner: owner, regSeq: regSeq, byName: map[string]*progression{}, settings: settings}
	f.addProgression(outboxName)
	return f
}

// addProgression appends an empty progression named name, which must not be in use. The caller
// holds f.mu (or owns f exclusively).
func (f *flow) addProgression(name string) *progression {
	p := &progression{name: name, ord: f.nextOrd}
	f.nextOrd++
	if rest, ok := strings.CutPrefix(name, inboxPrefix); ok {
		p.sender, _ = uuid.Parse(rest)
		p.inbox = true
	}
	f.progs = append(f.progs, p)
	f.byName[name] = p
	return p
}

// outbox returns the outbox progression.
func (f *flow) outbox() *progression { return f.byName[outboxName] }

// push appends e to p, stamping its insertion number.
func (f *flow) push(p *progression, e entry) {
	f.nextSeq++
	e.seq = f.nextSeq
	p.q.push(e)
	f.items++
	f.bytes += e.bytes()
}

// popFront removes the oldest entry of p, which must have no lease state (p.leased == 0, or the
// outbox).
func (f *flow) popFront(p *progression) (entry, bool) {
	e, ok := p.q.popFront()
	if ok {
		f.items--
		f.bytes -= e.bytes()
	}
	return e, ok
}

// removeAt removes the entry at index i of p.live(), whatever its lease state, keeping the
// counts. The caller holds f.mu and gives the entry's bytes back to the budget, or moves them.
func (f *flow) removeAt(p *progression, i int) entry {
	e := p.q.removeAt(i)
	f.items--
	f.bytes -= e.bytes()
	if e.attempts() > 0 {
		p.leased--
		f.leased--
	}
	return e
}

// keepDead keeps dl as a dead letter, evicting the oldest past limit, and returns the bytes the
// eviction freed.
func (f *flow) keepDead(dl DeadLetter, limit int) int64 {
	freed := f.dead.add(dl, limit)
	f.bytes += dl.size - freed
	return freed
}

// inbox returns the inbox of sender, creating it on first delivery (ADR-0006 D5); an inbox
// reclaimed earlier is created anew, after every existing one.
func (f *flow) inbox(sender uuid.UUID) *progression {
	name := inboxName(sender)
	if p, ok := f.byName[name]; ok {
		return p
	}
	return f.addProgression(name)
}

// reclaim removes the empty inbox p (its sender is no longer registered): an owner that many
// short-lived senders wrote to does not keep one progression per sender forever. The caller holds
// f.mu.
func (f *flow) reclaim(p *progression) {
	delete(f.byName, p.name)
	p.removed = true
	f.dropped++
	if f.dropped > compactProgressionsAfter && f.dropped*2 > len(f.progs) {
		// In place: progs is only read under f.mu.
		f.progs = slices.DeleteFunc(f.progs, func(p *progression) bool { return p.removed })
		f.dropped = 0
	}
}

// release drops what the flow held once Unregister has returned it, so that a tombstone left in
// the registry's order, or a view an in-flight collect keeps, does not keep the messages alive.
// The caller holds f.mu and has set f.closed.
func (f *flow) release() {
	f.progs, f.byName, f.items, f.bytes = nil, nil, 0, 0
	f.leased, f.dueAt = 0, 0
	f.dead = deadLetters{}
}

// progressionAt returns the index in f.progs of the first progression whose ord is at least ord.
func (f *flow) progressionAt(ord uint64) int {
	i, _ := slices.BinarySearchFunc(f.progs, ord, func(p *progression, o uint64) int { return cmpUint(p.ord, o) })
	return i
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
