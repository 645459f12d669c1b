package exchange

import (
	"context"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Drop is one recipient a message did not reach, and why.
type Drop struct {
	// Recipient is who the message was for (see DeadLetter.Recipient).
	Recipient envelope.Participant
	// Reason says why it was dropped.
	Reason Reason
}

// Delivery is what Collect did with one message.
type Delivery struct {
	// Message is the collected message.
	Message *envelope.Message
	// ReachedCount is the number of owners whose inbox received it.
	ReachedCount int
	// Reached are the owners whose inbox received it, in delivery order (registration order for a
	// broadcast), when the report was asked for with ReportOptions.OwnerIDs; nil otherwise.
	Reached []uuid.UUID
	// Dropped are the recipients it did not reach; each is also a dead letter of the sender.
	Dropped []Drop
}

// Report is Collect's delivery report for one owner's outbox.
type Report struct {
	// Owner is the collected owner, the sender of every message.
	Owner uuid.UUID
	// Deliveries has one entry per collected message, in outbox order.
	Deliveries []Delivery
	// Delivered is the number of unique message ids delivered to at least one owner: LionAGI's
	// return value, so a broadcast counts once (ADR-0006 D5).
	Delivered int
	// Drops is the number of drops across Deliveries (each is a dead letter of Owner).
	Drops int
}

// ReportOptions choose what a delivery report holds beyond its counts and drops.
type ReportOptions struct {
	// OwnerIDs keeps, for each message, the owners it reached (Delivery.Reached). Without it only
	// their number is kept, so that the report of broadcasts does not grow with the number of
	// owners.
	OwnerIDs bool
}

// outcome is the result of one delivery attempt.
type outcome uint8

const (
	delivered outcome = iota
	recipientLeft
	inboxFull
)

// Collect drains owner's outbox in order and routes each message (ADR-0006 D5), reporting the
// owners each message reached: an explicit None recipient broadcasts the same message to every
// other owner registered when the collect routes its first broadcast (one snapshot per collect,
// shared by all its broadcasts), never to the sender; a direct message reaches its recipient only
// when that is a registered owner at its delivery; everything else is dropped and kept as a dead
// letter of the sender with its reason. An owner that is not registered is ErrOwnerNotRegistered.
//
// Collect holds only owner's collect lock for its whole run; each recipient's lock is taken for
// one append at a time, so sends, receives and pops of every owner proceed meanwhile.
func (x *Exchange) Collect(owner uuid.UUID) (*Report, error) {
	return x.CollectWith(owner, ReportOptions{OwnerIDs: true})
}

// CollectWith is Collect with a report shaped by o.
func (x *Exchange) CollectWith(owner uuid.UUID, o ReportOptions) (*Report, error) {
	f := x.lookup(owner)
	if f == nil {
		return nil, ownerErr("Owner", owner, ErrOwnerNotRegistered)
	}
	rep, ok := x.collect(f, o)
	if !ok {
		return nil, ownerErr("Owner", owner, ErrOwnerNotRegistered)
	}
	return rep, nil
}

// collect collects f; false when f's owner has been unregistered.
func (x *Exchange) collect(f *flow, o ReportOptions) (*Report, bool) {
	f.collectMu.Lock()
	defer f.collectMu.Unlock()

	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil, false
	}
	batch := f.outbox().q.drain()
	f.items -= len(batch)
	for _, e := range batch {
		f.bytes -= e.bytes()
	}
	f.mu.Unlock()

	owner := f.owner
	if x.testHookMidCollect != nil {
		x.testHookMidCollect(owner)
	}

	rep := &Report{Owner: owner, Deliveries: make([]Delivery, 0, len(batch))}
	var (
		others view // the broadcast snapshot, taken at the first broadcast
		snap   bool
		dead   []DeadLetter
	)
	for _, e := range batch {
		d := Delivery{Message: e.msg}
		if e.msg.IsBroadcast() {
			if !snap {
				others, snap = x.reg.view(), true
			}
			for _, r := range others.flows(0) {
				if r.owner == owner {
					continue // the sender does not receive its own broadcast
				}
				x.record(f, &d, r.owner, x.deliver(r, owner, e), o)
			}
			if d.ReachedCount == 0 && len(d.Dropped) == 0 {
				d.Dropped = append(d.Dropped, BroadcastDrop())
			}
		} else {
			x.routeDirect(f, &d, e, o)
		}
		if d.ReachedCount > 0 {
			rep.Delivered++
		}
		if len(d.Dropped) > 0 {
			rep.Drops += len(d.Dropped)
			at := x.opts.now()
			for _, dr := range d.Dropped {
				dead = append(dead, DeadLetter{Message: e.msg, Recipient: dr.Recipient, Reason: dr.Reason, At: at, size: e.bytes()})
				x.budget.charge(e.bytes())
			}
		}
		// The outbox entry's bytes move to the inbox and dead-letter copies charged above.
		x.budget.release(e.bytes())
		rep.Deliveries = append(rep.Deliveries, d)
	}
	if len(dead) > 0 {
		// Still under collectMu, so an Unregister of owner (which waits for it) returns them.
		var freed int64
		f.mu.Lock()
		for _, dl := range dead {
			freed += f.keepDead(dl, x.opts.maxDeadLetters)
		}
		f.mu.Unlock()
		x.budget.release(freed)
		x.stats.deadLettered.Add(uint64(len(dead)))
	}
	return rep, true
}

// routeDirect delivers a message of sender f whose recipient is not None: only a registered
// owner's UUID reaches an inbox (ADR-0006 D5).
func (x *Exchange) routeDirect(f *flow, d *Delivery, e entry, o ReportOptions) {
	var r *flow
	id, ok, reason := RouteDirect(e.msg.Recipient, func(id uuid.UUID) bool { r = x.lookup(id); return r != nil }, e.recipientWasRegistered())
	if ok {
		x.record(f, d, id, x.deliver(r, f.owner, e), o)
		return
	}
	d.Dropped = append(d.Dropped, Drop{Recipient: e.msg.Recipient, Reason: reason})
}

// record notes the outcome of one delivery by sender f to owner. The caller holds f.collectMu.
func (x *Exchange) record(f *flow, d *Delivery, owner uuid.UUID, out outcome, o ReportOptions) {
	switch out {
	case delivered:
		d.ReachedCount++
		if o.OwnerIDs {
			d.Reached = append(d.Reached, owner)
		}
		x.noteRecipient(f, owner)
	case recipientLeft:
		d.Dropped = append(d.Dropped, Drop{Recipient: envelope.IDParticipant(owner), Reason: ReasonRecipientLeft})
	case inboxFull:
		d.Dropped = append(d.Dropped, Drop{Recipient: envelope.IDParticipant(owner), Reason: ReasonInboxFull})
	}
}

// deliver appends e's message to the inbox of sender in r, creating it on first delivery, charges
// its bytes to the budget (Send admitted them), and hands it to r's live subscriptions without
// waiting for any of them.
func (x *Exchange) deliver(r *flow, sender uuid.UUID, e entry) outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return recipientLeft
	}
	in := r.inbox(sender)
	if x.opts.maxInbox > 0 && in.len() >= x.opts.maxInbox {
		return inboxFull
	}
	r.push(in, e.delivered())
	x.budget.charge(e.bytes())
	r.publish(sender, e.msg)
	return delivered
}

// AllReport is CollectAll's report.
type AllReport struct {
	// Reports has one report per visited owner whose outbox held messages, in registration order.
	Reports []*Report
	// Delivered is the sum of the reports' Delivered counts (LionAGI's collect_all return value).
	Delivered int
}

// CollectAll collects every owner of a snapshot of the registered owners, one after another in
// registration order, skipping those unregistered before their turn (ADR-0006 D5: collect_all; sync
// is its alias); the reports are shaped by o. It checks ctx before each owner: once ctx is done it
// returns what it has collected so far with ctx's error, and leaves the remaining outboxes as they
// are (a collect that has started always finishes).
func (x *Exchange) CollectAll(ctx context.Context, o ReportOptions) (*AllReport, error) {
	all := &AllReport{}
	for _, f := range x.reg.view().flows(0) {
		if err := ctx.Err(); err != nil {
			return all, err
		}
		rep, ok := x.collect(f, o)
		if !ok {
			continue // removed before its turn
		}
		all.Delivered += rep.Delivered
		if len(rep.Deliveries) > 0 {
			all.Reports = append(all.Reports, rep)
		}
	}
	return all, nil
}
