package exchangedb

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/exchange"
)

// Leases (issue 18; exchange/lease.go has the rules). A lease is three columns of the delivery's
// ledger row, which stays in its inbox (state inbox) until it is acknowledged, popped,
// dead-lettered or returned: attempts, visible_at (Unix nanoseconds of the engine's clock: the
// deadline, or the end of a Nack's delay) and held (heldLease, or heldLast on the message's last
// attempt, which the max-attempts sweep looks for: sweep.go). A receipt names the row (message,
// and the owner as recipient) and the attempt: it is held while the row is in the owner's inbox,
// held, at that attempt, from that sender.
//
// Locks (docs/decisions/0019's order: owner row, then ledger rows, then a sender's row): Lease
// and ExtendLease read the owner row FOR KEY SHARE (Unregister's FOR UPDATE waits for them; Pop,
// Collect and Ack do not), and Lease takes its rows FOR UPDATE SKIP LOCKED, so competing leasers
// on any replica take different messages and never the same one at once. Ack and Nack change the
// owner's counters (the inbox count, the dead letters), so they lock the owner row FOR NO KEY
// UPDATE, as Pop does; they lock the receipt's row FOR UPDATE and check it there.

// The held column's values.
const (
	heldNone  = 0 // no lease holds the row
	heldLease = 1 // a lease holds it
	heldLast  = 2 // a lease holds it on the message's last attempt: its end makes a dead letter
)

// qLeaseOwner reads the owner's lease settings and whether a sweep is due. Args: qDue's (tenant,
// owner, now, the inbox state), then tenant, owner.
const qLeaseOwner = `SELECT max_attempts, visibility_ns, ` + qDueExists + ` FROM exchange_owners WHERE tenant = ? AND owner = ?`

// qLeaseHidden counts the scope's rows held by unexpired leases and finds the earliest time a
// hidden one is visible again (0: none hidden), reading the hidden rows only: the range of
// exchange_ledger_by_visible past now (the literal visible_at > 0 is its partial index's
// condition, which both databases need to see in the query). Args: tenant, holder, now, the
// inbox state, then the sender when bySender.
func qLeaseHidden(bySender bool) string {
	q := `SELECT COUNT(CASE WHEN held > 0 THEN 1 END), COALESCE(MIN(visible_at), 0) FROM exchange_ledger
		WHERE tenant = ? AND holder = ? AND visible_at > 0 AND visible_at > ? AND state = ?`
	if bySender {
		q += ` AND sender = ?`
	}
	return q
}

// leaseVisible is the condition on a ledger row (l) of a Lease's scope that it is visible: in the
// holder's inboxes, never leased (visible_at 0) or visible again, and not a last attempt past its
// deadline (the sweep's: a Lease that found one swept first, and the term keeps such a row out on
// any replica's clock). With a sender, the scope is that sender's inbox, found by its ordinal.
// Args: tenant, holder, the inbox state, now, then tenant, holder, sender when bySender.
func leaseVisible(bySender bool) string {
	q := `l.tenant = ? AND l.holder = ? AND l.state = ? AND l.visible_at <= ? AND l.held < 2`
	if bySender {
		q += ` AND l.ord = (SELECT i.ord FROM exchange_inboxes i WHERE i.tenant = ? AND i.owner = ? AND i.sender = ?)`
	}
	return q
}

// leaseQuery selects the visible messages of a Lease's scope (leaseVisible) in Receive's order
// (inbox creation order, oldest first), as many as asked; the Engine appends the row lock
// (skipLocked). Args: leaseVisible's, then the limit. Bounded by exchange_ledger_by_holder
// (plan_test.go).
func leaseQuery(bySender bool) string {
	return `SELECT l.message, l.sender, l.attempts, m.body FROM exchange_ledger l JOIN exchange_messages m ON m.tenant = l.tenant AND m.id = l.message
		WHERE ` + leaseVisible(bySender) + ` ORDER BY l.ord, l.seq LIMIT ?`
}

// leaseLeft finds whether a visible message of a Lease's scope is left, without locking it: a
// Lease that MaxHeld stopped before it read a row asks it for LeaseResult.More (a row another
// leaser is taking counts: More may be set with none left). Args: leaseVisible's. Bounded by
// exchange_ledger_by_holder (plan_test.go), which its ORDER BY makes SQLite choose (without it,
// SQLite searched the primary key by tenant alone).
func leaseLeft(bySender bool) string {
	return `SELECT 1 FROM exchange_ledger l WHERE ` + leaseVisible(bySender) + ` ORDER BY l.ord, l.seq LIMIT 1`
}

// ownerSettings resolves an owner row's stored settings: 0 (an owner registered before the
// leases' migration) is the Exchange's default; every value is held within its bounds
// (exchange.OwnerSettings.Resolve).
func (e *Engine) ownerSettings(maxAttempts, visibilityNs int64) exchange.OwnerSettings {
	return exchange.OwnerSettings{MaxAttempts: int(maxAttempts), Visibility: time.Duration(visibilityNs)}.Resolve(e.set)
}

// leaseInfo is a stored lease state as Receive shows it.
func leaseInfo(attempts, visibleAt, held int64) exchange.LeaseInfo {
	if attempts == 0 {
		return exchange.LeaseInfo{}
	}
	return exchange.LeaseInfo{Attempts: int(attempts), VisibleAt: timeOfNanos(visibleAt), Held: held != heldNone}
}

// Lease leases visible messages of req.Owner's inboxes (exchange/lease.go): up to req.Max, within
// req.MaxBytes (a message's stored JSON length) and req.MaxHeld, each with its attempt, its
// deadline (now + req.Visibility, or the owner's; exchange.LeaseRequest.Bounds) and a receipt.
// More is set when a limit cut the batch or when it took as many rows as it asked for (it reads
// no further to tell). ErrOwnerNotRegistered for an owner not registered. An expired last-attempt
// lease is swept first (sweep.go): the transaction gives way to the sweep and runs again.
func (e *Engine) Lease(ctx context.Context, req exchange.LeaseRequest) (exchange.LeaseResult, error) {
	oid := req.Owner.String()
	for swept := false; ; swept = true {
		now := e.now()
		var res exchange.LeaseResult
		err := e.d.Write(ctx, func(ctx context.Context, q Querier) error {
			res = exchange.LeaseResult{}
			var maxAttempts, visibility, due int64
			if err := q.QueryRow(ctx, qLeaseOwner+e.dia.forKeyShare(), tenant, oid, now.UnixNano(), stInbox, tenant, oid).Scan(&maxAttempts, &visibility, &due); err != nil {
				if q.IsNoRows(err) {
					return ownerErr("Owner", req.Owner, exchange.ErrOwnerNotRegistered)
				}
				return err
			}
			if due != 0 && !swept {
				return errSweepDue
			}
			set := e.ownerSettings(maxAttempts, visibility)
			var err error
			if res, err = e.lease(ctx, q, req, set, now); err != nil {
				res = exchange.LeaseResult{}
			}
			return err
		}, nil)
		if errors.Is(err, errSweepDue) {
			if err := e.sweepOwner(ctx, req.Owner, now.UnixNano()); err != nil {
				return exchange.LeaseResult{}, err
			}
			continue
		}
		return res, err
	}
}

// lease is Lease's work once the owner row is read (and locked FOR KEY SHARE).
func (e *Engine) lease(ctx context.Context, q Querier, req exchange.LeaseRequest, set exchange.OwnerSettings, now time.Time) (exchange.LeaseResult, error) {
	var res exchange.LeaseResult
	limit, visibility := req.Bounds(set)
	oid, ns := req.Owner.String(), now.UnixNano()
	hiddenArgs := []any{tenant, oid, ns, stInbox}
	if req.Sender != nil {
		hiddenArgs = append(hiddenArgs, req.Sender.String())
	}
	var held, next int64
	if err := q.QueryRow(ctx, qLeaseHidden(req.Sender != nil), hiddenArgs...).Scan(&held, &next); err != nil {
		return res, err
	}
	res.Held = int(held)
	if next > 0 {
		res.NextVisible = timeOfNanos(next)
	}
	args := []any{tenant, oid, stInbox, ns}
	if req.Sender != nil {
		args = append(args, tenant, oid, req.Sender.String())
	}
	if req.MaxHeld > 0 {
		limit = min(limit, req.MaxHeld-res.Held)
	}
	if limit <= 0 {
		// MaxHeld stopped it before it read a row: More when a visible one is left.
		var one int64
		err := q.QueryRow(ctx, leaseLeft(req.Sender != nil), args...).Scan(&one)
		switch {
		case q.IsNoRows(err):
			return res, nil
		case err != nil:
			return res, err
		}
		res.More = true
		return res, nil
	}
	deadline := ns + visibility.Nanoseconds()
	args = append(args, int64(limit))
	type candidate struct {
		leaseRow
		body string
	}
	var rows []candidate
	err := collect(ctx, q, func(r Rows) error {
		var c candidate
		if err := r.Scan(&c.message, &c.sender, &c.attempts, &c.body); err != nil {
			return err
		}
		rows = append(rows, c)
		return nil
	}, leaseQuery(req.Sender != nil)+e.dia.skipLocked("l"), args...)
	if err != nil {
		return res, err
	}
	var size int64
	for _, c := range rows {
		size += int64(len(c.body))
		if len(res.Leases) > 0 && req.MaxBytes > 0 && size > req.MaxBytes {
			res.More = true // this row, at least, is left
			break           // the first message is always taken
		}
		m, err := decodeMessage(c.body)
		if err != nil {
			return res, err
		}
		sender, err := parseUUID(c.sender)
		if err != nil {
			return res, err
		}
		attempt := c.attempts + 1
		mark := int64(heldLease)
		if attempt >= int64(set.MaxAttempts) {
			mark = heldLast
		}
		// prev_held = held: the old value (both databases evaluate an UPDATE's expressions on
		// the row as it was), for a Release of this lease (migration 00004).
		if err := q.Defer(ctx, `UPDATE exchange_ledger SET attempts = ?, visible_at = ?, held = ?, prev_held = held WHERE tenant = ? AND message = ? AND recipient = ?`,
			attempt, deadline, mark, tenant, c.message, oid); err != nil {
			return res, err
		}
		res.Leases = append(res.Leases, exchange.Leased{
			Message:  m,
			Receipt:  exchange.Receipt{Message: m.ID, Sender: sender, Attempt: int(attempt)},
			Deadline: timeOfNanos(deadline),
		})
	}
	// As many rows as asked for: more may be left (a LIMIT one higher would tell, but would lock
	// a row this call does not take, which competing leasers then pass over).
	if len(rows) == limit {
		res.More = true
	}
	if len(res.Leases) > 0 {
		res.Held += len(res.Leases)
		if next == 0 || deadline < next {
			res.NextVisible = timeOfNanos(deadline)
		}
	}
	return res, nil
}

// heldLease reads the ledger row of r at owner, locked (FOR UPDATE), and returns it when r's
// lease is held: the row is in owner's inbox, from r's sender, held, at r's attempt. Otherwise the
// message moved on (leased again, acknowledged, nacked, popped, dead-lettered or returned) or was
// never owner's: exchange.StaleLease.
func (e *Engine) heldLease(ctx context.Context, q Querier, owner uuid.UUID, r exchange.Receipt) (leaseRow, error) {
	lr := leaseRow{message: r.Message.String()}
	var state, holder string
	err := q.QueryRow(ctx, `SELECT sender, state, holder, attempts, held FROM exchange_ledger WHERE tenant = ? AND message = ? AND recipient = ?`+e.dia.forUpdate(),
		tenant, lr.message, owner.String()).Scan(&lr.sender, &state, &holder, &lr.attempts, &lr.held)
	switch {
	case q.IsNoRows(err):
		return lr, exchange.StaleLease(owner, r)
	case err != nil:
		return lr, err
	}
	if state != stInbox || holder != owner.String() || lr.held == heldNone || lr.attempts != int64(r.Attempt) || lr.sender != r.Sender.String() {
		return lr, exchange.StaleLease(owner, r)
	}
	return lr, nil
}

// lockOwnerCounters locks owner's row FOR NO KEY UPDATE (as Pop does) and reads its dead-letter
// counters; ErrOwnerNotRegistered when there is none.
func (e *Engine) lockOwnerCounters(ctx context.Context, q Querier, owner uuid.UUID) (recipientRow, error) {
	var own recipientRow
	err := q.QueryRow(ctx, `SELECT next_dead, dead FROM exchange_owners WHERE tenant = ? AND owner = ?`+e.dia.forNoKeyUpdate(),
		tenant, owner.String()).Scan(&own.nextDead, &own.dead)
	if q.IsNoRows(err) {
		return own, ownerErr("Owner", owner, exchange.ErrOwnerNotRegistered)
	}
	return own, err
}

// inboxCount reads the count of sender's inbox at owner, for leaveInbox, once a leased row of it
// is locked: that row is in the inbox, so a missing inbox is a fault, not a case.
func inboxCount(ctx context.Context, q Querier, owner, sender string) (int64, error) {
	var count int64
	err := q.QueryRow(ctx, `SELECT count FROM exchange_inboxes WHERE tenant = ? AND owner = ? AND sender = ?`, tenant, owner, sender).Scan(&count)
	return count, err
}

// Ack removes the message of a held lease: its ledger row is acked (pruned after the retention,
// as popped rows are) and it leaves its inbox as a popped message does (leaveInbox: the Ack that
// empties a departed sender's inbox reclaims it). ErrLeaseStale when the lease is no longer held,
// ErrOwnerNotRegistered when owner is not registered; nothing changes then.
func (e *Engine) Ack(ctx context.Context, owner uuid.UUID, r exchange.Receipt) error {
	oid := owner.String()
	return e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		if _, err := e.lockOwnerCounters(ctx, q, owner); err != nil {
			return err
		}
		lr, err := e.heldLease(ctx, q, owner, r)
		if err != nil {
			return err
		}
		count, err := inboxCount(ctx, q, oid, lr.sender)
		if err != nil {
			return err
		}
		if err := q.Defer(ctx, `UPDATE exchange_ledger SET state = ?, done_at = ?, held = 0, visible_at = 0 WHERE tenant = ? AND message = ? AND recipient = ?`,
			stAcked, e.now().UnixNano(), tenant, lr.message, oid); err != nil {
			return err
		}
		if err := q.Defer(ctx, `UPDATE exchange_owners SET inbox = inbox - 1 WHERE tenant = ? AND owner = ?`, tenant, oid); err != nil {
			return err
		}
		return e.leaveInbox(ctx, q, q.Defer, oid, lr.sender, count, 1)
	}, nil)
}

// Nack ends a held lease: the message is visible again after delay (exchange.ClampDelay: <= 0 is
// at once), or, on its
// last attempt, a dead letter of owner with ReasonMaxAttempts (deadLettered; sweep.go's
// deadLetterLeased). Errors as Ack.
func (e *Engine) Nack(ctx context.Context, owner uuid.UUID, r exchange.Receipt, delay time.Duration) (bool, error) {
	var dead bool
	oid := owner.String()
	err := e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		dead = false
		now := e.now().UnixNano()
		own, err := e.lockOwnerCounters(ctx, q, owner)
		if err != nil {
			return err
		}
		lr, err := e.heldLease(ctx, q, owner, r)
		if err != nil {
			return err
		}
		if lr.held == heldLast {
			if err := e.deadLetterLeased(ctx, q, oid, &own, []leaseRow{lr}, now); err != nil {
				return err
			}
			dead = true
			return nil
		}
		return q.Defer(ctx, `UPDATE exchange_ledger SET held = 0, visible_at = ? WHERE tenant = ? AND message = ? AND recipient = ?`,
			now+exchange.ClampDelay(delay).Nanoseconds(), tenant, lr.message, oid)
	}, nil)
	if err != nil {
		return false, err
	}
	return dead, nil
}

// shareOwner reads owner's row FOR KEY SHARE, as Lease reads it, for a call that changes a lease's
// row alone (ExtendLease, Release): Unregister's FOR UPDATE waits for it, Pop and Ack do not.
// ErrOwnerNotRegistered when there is none.
func (e *Engine) shareOwner(ctx context.Context, q Querier, owner uuid.UUID) error {
	var one int64
	err := q.QueryRow(ctx, `SELECT 1 FROM exchange_owners WHERE tenant = ? AND owner = ?`+e.dia.forKeyShare(), tenant, owner.String()).Scan(&one)
	if q.IsNoRows(err) {
		return ownerErr("Owner", owner, exchange.ErrOwnerNotRegistered)
	}
	return err
}

// ExtendLease sets a held lease's deadline to now + d (exchange.ClampVisibility) and returns it.
// The owner row is read FOR KEY SHARE (shareOwner): only the lease's row changes. Errors as Ack.
func (e *Engine) ExtendLease(ctx context.Context, owner uuid.UUID, r exchange.Receipt, d time.Duration) (time.Time, error) {
	var deadline int64
	oid := owner.String()
	err := e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		if err := e.shareOwner(ctx, q, owner); err != nil {
			return err
		}
		lr, err := e.heldLease(ctx, q, owner, r)
		if err != nil {
			return err
		}
		deadline = e.now().UnixNano() + exchange.ClampVisibility(d).Nanoseconds()
		return q.Defer(ctx, `UPDATE exchange_ledger SET visible_at = ? WHERE tenant = ? AND message = ? AND recipient = ?`, deadline, tenant, lr.message, oid)
	}, nil)
	if err != nil {
		return time.Time{}, err
	}
	return timeOfNanos(deadline), nil
}

// Release gives back a held lease that was never handed out (exchange.Service.Release): the lease
// ends and its attempt is undone, the message visible at once. A row back at 0 attempts is as
// never leased (visible_at 0: it leaves exchange_ledger_by_visible, and Receive and the ledger
// show no lease); one with attempts left is visible from now, as after a Nack with no delay, and
// held as it was when this lease took it (prev_held: the lease before still holds it if no one
// else had taken it, so its receipt acknowledges the message again). held is never 2 after it,
// whether this lease was a last attempt or not (the attempt before one is not the last): the row
// leaves exchange_ledger_by_last, so the sweep never makes it a dead letter, and the next Lease
// marks its last attempt again.
// The owner row is read FOR KEY SHARE (shareOwner): only the lease's row changes. Errors as Ack.
func (e *Engine) Release(ctx context.Context, owner uuid.UUID, r exchange.Receipt) error {
	oid := owner.String()
	return e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		if err := e.shareOwner(ctx, q, owner); err != nil {
			return err
		}
		lr, err := e.heldLease(ctx, q, owner, r)
		if err != nil {
			return err
		}
		if attempts := lr.attempts - 1; attempts > 0 {
			return q.Defer(ctx, `UPDATE exchange_ledger SET attempts = ?, visible_at = ?, held = prev_held, prev_held = 0 WHERE tenant = ? AND message = ? AND recipient = ?`,
				attempts, e.now().UnixNano(), tenant, lr.message, oid)
		}
		return q.Defer(ctx, `UPDATE exchange_ledger SET attempts = 0, visible_at = 0, held = 0, prev_held = 0 WHERE tenant = ? AND message = ? AND recipient = ?`,
			tenant, lr.message, oid)
	}, nil)
}
