package exchange

import (
	"iter"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// The memory engine's leases (issue 18; the rules are lease.go's). A lease lives on its inbox
// entry (entry.lease), so a leased message stays where it is: Receive shows it in place, the inbox
// bound counts it and Unregister returns it with the rest. Every count that could tell a path it
// may skip the lease checks (progression.leased, flow.leased, flow.dueAt) is kept under the flow's
// mu, so an owner that never leases pays one comparison per call.

// leaseState is how one inbox entry stands with leases.
type leaseState struct {
	attempts  int       // leases taken, the current one included
	visibleAt time.Time // the lease's deadline, or the end of a Nack's delay
	held      bool      // a lease holds it: set by Lease, cleared by Nack (lease.go: until Ack, Nack or another taker)
}

// info is the state as Receive reports it; a nil state is a message never leased.
func (l *leaseState) info() LeaseInfo {
	if l == nil {
		return LeaseInfo{}
	}
	return LeaseInfo{Attempts: l.attempts, VisibleAt: l.visibleAt, Held: l.held}
}

// hidden reports whether the entry is invisible to Lease and Pop at now.
func (l *leaseState) hidden(now time.Time) bool { return l != nil && now.Before(l.visibleAt) }

// resolveSettings is the OwnerSettings Register keeps: the first of settings, its zero fields
// filled from the Exchange's defaults (WithLeaseDefaults), then held within lease.go's bounds
// (1..MaxMaxAttempts, MinVisibility..MaxVisibility). The handlers refuse values out of bounds
// before they get here; an in-process caller gets the nearest bound rather than an error.
func (x *Exchange) resolveSettings(settings []OwnerSettings) OwnerSettings {
	var s OwnerSettings
	if len(settings) > 0 {
		s = settings[0]
	}
	s = s.Resolve(Settings{MaxAttempts: x.opts.maxAttempts, Visibility: x.opts.visibility})
	s.MaxAttempts = min(max(s.MaxAttempts, 1), MaxMaxAttempts)
	s.Visibility = min(max(s.Visibility, MinVisibility), MaxVisibility)
	return s
}

// leasedFlow returns owner's flow locked, or ErrOwnerNotRegistered. The caller unlocks f.mu.
func (x *Exchange) leasedFlow(owner uuid.UUID) (*flow, error) {
	f := x.lookup(owner)
	if f == nil {
		return nil, ownerErr("Owner", owner, ErrOwnerNotRegistered)
	}
	f.mu.Lock()
	if f.closed { // unregistered since the lookup
		f.mu.Unlock()
		return nil, ownerErr("Owner", owner, ErrOwnerNotRegistered)
	}
	return f, nil
}

// Lease leases up to req.Max visible messages of req.Owner's inboxes (only req.Sender's when set),
// in Receive's order, each for req.Visibility (0: the owner's; held within MinVisibility..
// MaxVisibility), and reports the scope's held leases and when its next hidden message becomes
// visible (lease.go). An owner that is not registered is ErrOwnerNotRegistered.
//
// It costs O(entries walked): the scope's leased entries (to count the held ones) and its
// entries up to the last one taken.
func (x *Exchange) Lease(req LeaseRequest) (LeaseResult, error) {
	f, err := x.leasedFlow(req.Owner)
	if err != nil {
		return LeaseResult{}, err
	}
	defer f.mu.Unlock()
	now := x.opts.now()
	x.expireLeasesAt(f, now)
	vis := req.Visibility
	if vis <= 0 {
		vis = f.settings.Visibility
	}
	vis = min(max(vis, MinVisibility), MaxVisibility)
	deadline := now.Add(vis)
	want := min(max(req.Max, 1), MaxLeaseBatch)

	var (
		res   LeaseResult
		bytes int64
	)
	if f.leased > 0 {
		res.Held, res.NextVisible = f.heldIn(req.Sender, now)
	}
	take := func(p *progression) bool {
		live := p.live()
		for i := range live {
			if len(res.Leases) == want || (req.MaxHeld > 0 && res.Held >= req.MaxHeld) {
				return false
			}
			e := &live[i]
			if e.lease.hidden(now) {
				continue
			}
			if req.MaxBytes > 0 {
				size := MessageSize(e.msg)
				if len(res.Leases) > 0 && bytes+size > req.MaxBytes {
					return false
				}
				bytes += size
			}
			if e.lease == nil {
				e.lease = &leaseState{}
				p.leased++
				f.leased++
			}
			// A visible entry has attempts below MaxAttempts: expireLeasesAt made dead letters of
			// the others, and Nack does at once.
			e.lease.attempts++
			e.lease.held = true
			e.lease.visibleAt = deadline
			if e.lease.attempts >= f.settings.MaxAttempts {
				f.noteDue(deadline)
			}
			res.Held++
			res.Leases = append(res.Leases, Leased{
				Message:  e.msg,
				Receipt:  Receipt{Message: e.msg.ID, Sender: p.sender, Attempt: e.lease.attempts},
				Deadline: deadline,
			})
		}
		return true
	}
	for p := range f.inboxes(req.Sender) {
		if !take(p) {
			break
		}
	}
	if len(res.Leases) > 0 && (res.NextVisible.IsZero() || deadline.Before(res.NextVisible)) {
		res.NextVisible = deadline
	}
	return res, nil
}

// Ack removes the message of the lease r names (lease.go): ErrLeaseStale, changing nothing, when
// that lease is no longer held; ErrOwnerNotRegistered when owner is not registered. The Ack that
// empties the inbox of a sender that is no longer registered reclaims the inbox, as Pop does
// (reclaim.go).
func (x *Exchange) Ack(owner uuid.UUID, r Receipt) error {
	f, err := x.leasedFlow(owner)
	if err != nil {
		return err
	}
	defer f.mu.Unlock()
	p, i := f.findLease(r)
	if p == nil {
		return StaleLease(owner, r)
	}
	e := f.removeAt(p, i)
	x.budget.release(int64(e.size))
	x.reclaimIfDeparted(f, p)
	return nil
}

// Nack ends the lease r names (lease.go): the message is visible again after delay (held within
// 0..MaxVisibility), or, when its attempts reached the owner's MaxAttempts, becomes a dead letter
// of the owner with ReasonMaxAttempts (deadLettered). Errors as Ack.
func (x *Exchange) Nack(owner uuid.UUID, r Receipt, delay time.Duration) (deadLettered bool, err error) {
	f, err := x.leasedFlow(owner)
	if err != nil {
		return false, err
	}
	defer f.mu.Unlock()
	p, i := f.findLease(r)
	if p == nil {
		return false, StaleLease(owner, r)
	}
	now := x.opts.now()
	l := p.live()[i].lease
	if l.attempts >= f.settings.MaxAttempts {
		x.deadLetterLeased(f, p, i, now)
		x.reclaimIfDeparted(f, p)
		return true, nil
	}
	l.held = false
	l.visibleAt = now.Add(min(max(delay, 0), MaxVisibility))
	return false, nil
}

// ExtendLease sets the deadline of the lease r names to now + d (d held within MinVisibility..
// MaxVisibility) and returns it (lease.go). Errors as Ack.
func (x *Exchange) ExtendLease(owner uuid.UUID, r Receipt, d time.Duration) (time.Time, error) {
	f, err := x.leasedFlow(owner)
	if err != nil {
		return time.Time{}, err
	}
	defer f.mu.Unlock()
	p, i := f.findLease(r)
	if p == nil {
		return time.Time{}, StaleLease(owner, r)
	}
	l := p.live()[i].lease
	l.visibleAt = x.opts.now().Add(min(max(d, MinVisibility), MaxVisibility))
	if l.attempts >= f.settings.MaxAttempts {
		f.noteDue(l.visibleAt) // the deadline may have moved earlier
	}
	return l.visibleAt, nil
}

// findLease returns the inbox and index of the entry whose lease r names while that lease is
// held, or nil: the message is in r.Sender's inbox, a lease holds it (Nack, Ack, Pop, a dead
// letter and Unregister end it) and it is the lease of r's attempt (a later Lease makes another).
// It walks the inbox only as far as its last leased entry. The caller holds f.mu.
func (f *flow) findLease(r Receipt) (*progression, int) {
	p := f.byName[inboxName(r.Sender)]
	if p == nil || p.leased == 0 {
		return nil, 0
	}
	var seen int32
	for i, e := range p.live() {
		if e.lease == nil {
			continue
		}
		if e.msg.ID == r.Message {
			if e.lease.held && e.lease.attempts == r.Attempt {
				return p, i
			}
			return nil, 0
		}
		if seen++; seen == p.leased {
			break
		}
	}
	return nil, 0
}

// inboxes yields the inboxes a scope covers: sender's alone when sender is not nil, else every
// inbox in creation order. The caller holds f.mu and does not reclaim while iterating.
func (f *flow) inboxes(sender *uuid.UUID) iter.Seq[*progression] {
	return func(yield func(*progression) bool) {
		if sender != nil {
			if p := f.byName[inboxName(*sender)]; p != nil {
				yield(p)
			}
			return
		}
		for _, p := range f.progs {
			if p.inbox && !p.removed && !yield(p) {
				return
			}
		}
	}
}

// heldIn counts the scope's messages held by unexpired leases, and returns the earliest time one
// of its hidden messages becomes visible (zero: none is hidden). The caller holds f.mu.
func (f *flow) heldIn(sender *uuid.UUID, now time.Time) (held int, next time.Time) {
	for p := range f.inboxes(sender) {
		p.eachLeased(func(_ int, l *leaseState) bool {
			if l.hidden(now) {
				if l.held {
					held++
				}
				if next.IsZero() || l.visibleAt.Before(next) {
					next = l.visibleAt
				}
			}
			return true
		})
	}
	return held, next
}

// eachLeased calls fn with the index and state of each entry of p that has a lease state, oldest
// first, until fn returns false; it stops after the last such entry rather than walk the rest.
func (p *progression) eachLeased(fn func(i int, l *leaseState) bool) {
	if p.leased == 0 {
		return
	}
	var seen int32
	for i, e := range p.live() {
		if e.lease == nil {
			continue
		}
		if !fn(i, e.lease) {
			return
		}
		if seen++; seen == p.leased {
			return
		}
	}
}

// firstVisible returns the index of p's oldest entry visible at now, or -1.
func (p *progression) firstVisible(now time.Time) int {
	for i, e := range p.live() {
		if !e.lease.hidden(now) {
			return i
		}
	}
	return -1
}

// noteDue records that a lease at the owner's MaxAttempts ends at t. The caller holds f.mu.
func (f *flow) noteDue(t time.Time) {
	if f.dueAt.IsZero() || t.Before(f.dueAt) {
		f.dueAt = t
	}
}

// expireLeases makes dead letters of the messages whose lease at the owner's MaxAttempts has
// passed its deadline (lease.go: "noticed by the next call that looks at the owner's inboxes").
// The caller holds f.mu. With no lease at max attempts due it costs two comparisons and does not
// read the clock.
func (x *Exchange) expireLeases(f *flow) {
	if f.leased == 0 || f.dueAt.IsZero() {
		return
	}
	x.expireLeasesAt(f, x.opts.now())
}

// expireLeasesAt is expireLeases at now.
func (x *Exchange) expireLeasesAt(f *flow, now time.Time) {
	if f.leased == 0 || f.dueAt.IsZero() || now.Before(f.dueAt) {
		return
	}
	var (
		next  time.Time
		empty []*progression
	)
	for _, p := range f.progs {
		if !p.inbox || p.removed || p.leased == 0 {
			continue
		}
		// Walked by index: a dead letter removes the entry at i, and the next one takes its place.
		for i, seen, n := 0, int32(0), p.leased; seen < n && i < p.len(); {
			l := p.live()[i].lease
			if l == nil {
				i++
				continue
			}
			seen++
			switch {
			case l.attempts < f.settings.MaxAttempts:
				i++
			case now.Before(l.visibleAt):
				if next.IsZero() || l.visibleAt.Before(next) {
					next = l.visibleAt
				}
				i++
			default:
				x.deadLetterLeased(f, p, i, now)
			}
		}
		if p.len() == 0 {
			empty = append(empty, p)
		}
	}
	f.dueAt = next
	// After the walk: reclaiming may compact f.progs in place.
	for _, p := range empty {
		x.reclaimIfDeparted(f, p)
	}
}

// deadLetterLeased removes the entry at index i of p, whose lease ended at the owner's
// MaxAttempts, and keeps it as a dead letter of the owner (the recipient that leased it) with
// ReasonMaxAttempts and its attempt count. Its bytes move from the inbox to the dead letters; the
// bound's evictions give theirs back to the budget. The caller holds f.mu.
func (x *Exchange) deadLetterLeased(f *flow, p *progression, i int, now time.Time) {
	e := f.removeAt(p, i)
	freed := f.keepDead(DeadLetter{
		Message:   e.msg,
		Recipient: envelope.IDParticipant(f.owner),
		Reason:    ReasonMaxAttempts,
		At:        now,
		Attempts:  e.lease.attempts,
		size:      int64(e.size),
	}, x.opts.maxDeadLetters)
	x.budget.release(freed)
}

// reclaimIfDeparted reclaims p when it is empty and its sender is no longer registered, as the Pop
// that empties it does (reclaim.go). The caller holds f.mu.
func (x *Exchange) reclaimIfDeparted(f *flow, p *progression) {
	if !p.removed && p.len() == 0 && !x.isRegistered(p.sender) {
		f.reclaim(p)
	}
}
