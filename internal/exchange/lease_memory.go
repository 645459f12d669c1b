package exchange

import (
	"iter"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// The memory engine's leases (issue 18; the rules are lease.go's). A lease lives on its inbox
// entry (entry.visibleAt, and the attempts and held bits of entry.meta), so a leased message stays
// where it is: Receive shows it in place, the inbox bound counts it and Unregister returns it with
// the rest. The counts that tell a path it may skip the lease checks (progression.leased,
// flow.leased, flow.dueAt) are kept under the flow's mu, so an owner that never leases pays a
// comparison or two per call. Times are kept as Unix nanoseconds of the Exchange's clock, as the
// database engines keep them (lease.go).

// leaseInfo is the entry's lease state as Receive reports it.
func (e *entry) leaseInfo() LeaseInfo {
	if e.attempts() == 0 {
		return LeaseInfo{}
	}
	return LeaseInfo{Attempts: e.attempts(), VisibleAt: unixTime(e.visibleAt), Held: e.held()}
}

// hidden reports whether the entry is invisible to Lease and Pop at now (Unix nanoseconds).
func (e *entry) hidden(now int64) bool { return e.attempts() > 0 && now < e.visibleAt }

// unixTime is the time of n Unix nanoseconds, in UTC.
func unixTime(n int64) time.Time { return time.Unix(0, n).UTC() }

// resolveSettings is the OwnerSettings Register keeps: the first of settings, its zero fields
// filled from the Exchange's defaults (WithLeaseDefaults) and held within lease.go's bounds
// (RegisterSettings, as the database engines resolve them).
func (x *Exchange) resolveSettings(settings []OwnerSettings) OwnerSettings {
	return RegisterSettings(settings, Settings{MaxAttempts: x.opts.maxAttempts, Visibility: x.opts.visibility})
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
// in Receive's order, each for req.Visibility (0: the owner's; LeaseRequest.Bounds), and reports
// the scope's held leases, when its next hidden message becomes visible, and whether a limit left
// a visible one behind (More, exact here: the walk stops at the first visible entry it may not
// take). An owner that is not registered is ErrOwnerNotRegistered.
//
// It costs O(entries walked): the scope's leased entries (to count the held ones) and its
// entries up to the first visible one past the last taken (the entries between are hidden, so
// leased: at most the scope's leased entries more).
func (x *Exchange) Lease(req LeaseRequest) (LeaseResult, error) {
	f, err := x.leasedFlow(req.Owner)
	if err != nil {
		return LeaseResult{}, err
	}
	defer f.mu.Unlock()
	now := x.opts.now()
	x.expireLeasesAt(f, now)
	want, vis := req.Bounds(f.settings)
	deadline := unixTime(now.Add(vis).UnixNano())
	at, due := now.UnixNano(), deadline.UnixNano()

	var (
		res   LeaseResult
		bytes int64
	)
	if f.leased > 0 {
		res.Held, res.NextVisible = f.heldIn(req.Sender, at)
	}
	take := func(p *progression) bool {
		live := p.live()
		for i := range live {
			e := &live[i]
			if e.hidden(at) {
				continue
			}
			// A visible entry this call may not take: the limits are checked here, past the
			// hidden entries, so that More says whether one is left.
			if len(res.Leases) == want || (req.MaxHeld > 0 && res.Held >= req.MaxHeld) {
				res.More = true
				return false
			}
			if req.MaxBytes > 0 {
				size := e.bytes() - messageOverhead // MessageSize, without computing it again
				if len(res.Leases) > 0 && bytes+size > req.MaxBytes {
					res.More = true
					return false
				}
				bytes += size
			}
			if e.attempts() == 0 {
				p.leased++
				f.leased++
			}
			// A visible entry has attempts below MaxAttempts (so the increment stays within
			// MaxMaxAttempts): expireLeasesAt made dead letters of the others, and Nack does at once.
			e.setAttempts(e.attempts() + 1)
			e.setPrevHeld(e.held())
			e.setHeld(true)
			e.visibleAt = due
			if e.attempts() >= f.settings.MaxAttempts {
				f.noteDue(due)
			}
			res.Held++
			res.Leases = append(res.Leases, Leased{
				Message:  e.msg,
				Receipt:  Receipt{Message: e.msg.ID, Sender: p.sender, Attempt: e.attempts()},
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
	x.budget.release(e.bytes())
	x.reclaimIfDeparted(f, p)
	return nil
}

// Nack ends the lease r names (lease.go): the message is visible again after delay (ClampDelay),
// or, when its attempts reached the owner's MaxAttempts, becomes a dead letter of the owner with
// ReasonMaxAttempts (deadLettered). Errors as Ack.
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
	e := &p.live()[i]
	if e.attempts() >= f.settings.MaxAttempts {
		x.deadLetterLeased(f, p, i, now)
		x.reclaimIfDeparted(f, p)
		return true, nil
	}
	e.setHeld(false)
	e.visibleAt = now.Add(ClampDelay(delay)).UnixNano()
	return false, nil
}

// ExtendLease sets the deadline of the lease r names to now + d (ClampVisibility) and returns it
// (lease.go). Errors as Ack.
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
	e := &p.live()[i]
	e.visibleAt = x.opts.now().Add(ClampVisibility(d)).UnixNano()
	if e.attempts() >= f.settings.MaxAttempts {
		f.noteDue(e.visibleAt) // the deadline may have moved earlier
	}
	return unixTime(e.visibleAt), nil
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
	live := p.live()
	for i := range live {
		e := &live[i]
		if e.attempts() == 0 {
			continue
		}
		if e.msg.ID == r.Message {
			if e.held() && e.attempts() == r.Attempt {
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
func (f *flow) heldIn(sender *uuid.UUID, now int64) (held int, next time.Time) {
	var first int64
	for p := range f.inboxes(sender) {
		if p.leased == 0 {
			continue
		}
		// Only as far as the inbox's last leased entry.
		var seen int32
		for _, e := range p.live() {
			if e.attempts() == 0 {
				continue
			}
			if e.hidden(now) {
				if e.held() {
					held++
				}
				if first == 0 || e.visibleAt < first {
					first = e.visibleAt
				}
			}
			if seen++; seen == p.leased {
				break
			}
		}
	}
	if first != 0 {
		next = unixTime(first)
	}
	return held, next
}

// firstVisible returns the index of p's oldest entry visible at now, or -1.
func (p *progression) firstVisible(now int64) int {
	live := p.live()
	for i := range live {
		if !live[i].hidden(now) {
			return i
		}
	}
	return -1
}

// noteDue records that a lease at the owner's MaxAttempts ends at t (Unix nanoseconds). The
// caller holds f.mu.
func (f *flow) noteDue(t int64) {
	if f.dueAt == 0 || t < f.dueAt {
		f.dueAt = t
	}
}

// expireLeases makes dead letters of the messages whose lease at the owner's MaxAttempts has
// passed its deadline (lease.go: "noticed by the next call that looks at the owner's inboxes").
// The caller holds f.mu. With no lease at max attempts due it costs two comparisons and does not
// read the clock.
func (x *Exchange) expireLeases(f *flow) {
	if f.leased == 0 || f.dueAt == 0 {
		return
	}
	x.expireLeasesAt(f, x.opts.now())
}

// expireLeasesAt is expireLeases at now.
func (x *Exchange) expireLeasesAt(f *flow, now time.Time) {
	at := now.UnixNano()
	if f.leased == 0 || f.dueAt == 0 || at < f.dueAt {
		return
	}
	var (
		next  int64
		empty []*progression
	)
	for _, p := range f.progs {
		if !p.inbox || p.removed || p.leased == 0 {
			continue
		}
		// Walked by index: a dead letter removes the entry at i, and the next one takes its place.
		for i, seen, n := 0, int32(0), p.leased; seen < n && i < p.len(); {
			e := &p.live()[i]
			if e.attempts() == 0 {
				i++
				continue
			}
			seen++
			switch {
			case e.attempts() < f.settings.MaxAttempts:
				i++
			case e.hidden(at):
				if next == 0 || e.visibleAt < next {
					next = e.visibleAt
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
		Attempts:  e.attempts(),
		size:      e.bytes(),
	}, x.opts.maxDeadLetters)
	x.budget.release(freed)
	x.stats.deadLettered.Add(1)
}

// reclaimIfDeparted reclaims p when it is empty and its sender is no longer registered, as the Pop
// that empties it does (reclaim.go). The caller holds f.mu.
func (x *Exchange) reclaimIfDeparted(f *flow, p *progression) {
	if !p.removed && p.len() == 0 && !x.isRegistered(p.sender) {
		f.reclaim(p)
	}
}

// Release gives back the lease r names, which was never handed out (Service.Release): the lease
// ends and its attempt is undone, the message visible at once. An entry back at 0 attempts is as
// never leased (Receive shows no lease state, and the counts that keep lease-free paths lose it);
// one with attempts left keeps them, visible from now, and held again if the lease before was
// when this one took it (entryPrevHeld: past its deadline, a lease holds until someone else
// takes the message, so its receipt acknowledges it again). It never makes a dead letter: the attempts
// are below the owner's MaxAttempts after it. dueAt may stay earlier than every remaining lease
// at MaxAttempts, which its doc allows: the next expireLeasesAt walks once and sets it again.
// Errors as Ack.
func (x *Exchange) Release(owner uuid.UUID, r Receipt) error {
	f, err := x.leasedFlow(owner)
	if err != nil {
		return err
	}
	defer f.mu.Unlock()
	p, i := f.findLease(r)
	if p == nil {
		return StaleLease(owner, r)
	}
	e := &p.live()[i]
	e.setHeld(false)
	prev := e.prevHeld()
	e.setPrevHeld(false)
	if n := e.attempts() - 1; n > 0 {
		e.setHeld(prev)
		e.setAttempts(n)
		e.visibleAt = x.opts.now().UnixNano()
		return nil
	}
	e.setAttempts(0)
	e.visibleAt = 0
	p.leased--
	f.leased--
	return nil
}
