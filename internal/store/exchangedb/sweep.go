package exchangedb

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/exchange"
)

// The max-attempts sweep (exchange/lease.go: "An expired lease is noticed by the next call that
// looks at the owner's inboxes (Lease, PopIf, ReceivePage, Get, DeadLetters, UnregisterIf), before
// it answers"). A lease on a message's last attempt is marked held = 2 when it is taken; once its
// deadline passes, the message is a dead letter of the owner, reason ReasonMaxAttempts, with its
// attempt count. No timer makes it so: each of those calls probes exchange_ledger_by_last for
// such a lease of the owner (one index probe, which finds nothing for an owner with none) and
// sweeps first when it finds one. The sweep writes, so a read (ReceivePage, Get, DeadLetters)
// that finds one gives way to a write transaction that sweeps, then reads again (readSwept).

// qDue finds one expired last-attempt lease of a holder, by exchange_ledger_by_last (the partial
// index of held = 2 rows: nothing to read for an owner with none). Args: tenant, holder, now, the
// inbox state.
const qDue = `SELECT 1 FROM exchange_ledger WHERE tenant = ? AND holder = ? AND held = 2 AND visible_at <= ? AND state = ? LIMIT 1`

// qDueExists is qDue as a column, 1 or 0 (an integer in both dialects, not PostgreSQL's boolean).
const qDueExists = `CASE WHEN EXISTS (` + qDue + `) THEN 1 ELSE 0 END`

// qOwnerDue reads an owner row's dead-letter counters and whether a sweep is due, for the caller
// to lock (PopIf: FOR NO KEY UPDATE, the order Collect locks in; UnregisterIf: FOR UPDATE). Args:
// qDue's (tenant, owner, now, the inbox state), then tenant, owner.
const qOwnerDue = `SELECT next_dead, dead, ` + qDueExists + ` FROM exchange_owners WHERE tenant = ? AND owner = ?`

// qSweepSelect is the expired last-attempt leases of a holder, oldest deadline first (the order
// their dead letters are numbered in). Args: tenant, holder, now, the inbox state.
const qSweepSelect = `SELECT message, sender, attempts FROM exchange_ledger WHERE tenant = ? AND holder = ? AND held = 2 AND visible_at <= ? AND state = ?
	ORDER BY visible_at, ord, seq`

// errSweepDue is a transaction's way out to the sweep: it found an expired last-attempt lease it
// may not dead-letter under the locks it holds (a read, or a Lease's KEY SHARE).
var errSweepDue = errors.New("exchangedb: an expired last-attempt lease awaits its sweep")

// leaseRow is one leased delivery in holder's inbox.
type leaseRow struct {
	message, sender string
	attempts, held  int64
}

// due reports whether holder has an expired last-attempt lease at now.
func (e *Engine) due(ctx context.Context, q Querier, holder string, now int64) (bool, error) {
	var one int64
	err := q.QueryRow(ctx, qDue, tenant, holder, now, stInbox).Scan(&one)
	switch {
	case q.IsNoRows(err):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// readSwept runs read in a read transaction, after the sweep when one is due for owner: the read
// probes first and, finding one, gives way to sweepOwner, then reads again (without probing: the
// sweep ran at the same instant).
func (e *Engine) readSwept(ctx context.Context, owner uuid.UUID, read func(ctx context.Context, q Querier) error) error {
	now := e.now().UnixNano()
	oid := owner.String()
	err := e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		due, err := e.due(ctx, q, oid, now)
		if err != nil {
			return err
		}
		if due {
			return errSweepDue
		}
		return read(ctx, q)
	})
	if !errors.Is(err, errSweepDue) {
		return err
	}
	if err := e.sweepOwner(ctx, owner, now); err != nil {
		return err
	}
	return e.d.Read(ctx, read)
}

// sweepOwner sweeps owner's expired last-attempt leases at now in a write transaction of its own,
// under the owner's row lock (FOR NO KEY UPDATE: it numbers dead letters and counts them, as a
// collect does). Nothing for an owner not registered: Unregister returned its inboxes.
func (e *Engine) sweepOwner(ctx context.Context, owner uuid.UUID, now int64) error {
	return e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		own, err := e.lockOwnerCounters(ctx, q, owner)
		if errors.Is(err, exchange.ErrOwnerNotRegistered) {
			return nil
		}
		if err != nil {
			return err
		}
		return e.sweep(ctx, q, owner.String(), &own, now)
	}, nil)
}

// lockOwnerSwept locks owner's row with lock (qOwnerDue's caller's: PopIf's FOR NO KEY UPDATE,
// UnregisterIf's FOR UPDATE) and, when a sweep is due at now, sweeps under it, in the caller's
// transaction; false when owner is not registered. deadBefore is the number of owner's newest
// dead letter before the sweep: the sweep's are numbered above it.
func (e *Engine) lockOwnerSwept(ctx context.Context, q Querier, owner, lock string, now int64) (found bool, deadBefore uint64, err error) {
	var (
		own recipientRow
		due int64
	)
	if err := q.QueryRow(ctx, qOwnerDue+lock, tenant, owner, now, stInbox, tenant, owner).Scan(&own.nextDead, &own.dead, &due); err != nil {
		if q.IsNoRows(err) {
			return false, 0, nil
		}
		return false, 0, err
	}
	deadBefore = uint64(own.nextDead)
	if due != 0 {
		return true, deadBefore, e.sweep(ctx, q, owner, &own, now)
	}
	return true, deadBefore, nil
}

// sweep makes dead letters of holder's expired last-attempt leases at now. The caller holds
// holder's row lock (FOR NO KEY UPDATE or stronger) and read its counters into own. The rows are
// locked (FOR UPDATE): an ExtendLease in flight is waited for, and a lease it extended is no
// longer expired when the row is read again.
func (e *Engine) sweep(ctx context.Context, q Querier, holder string, own *recipientRow, now int64) error {
	var rows []leaseRow
	err := collect(ctx, q, func(r Rows) error {
		lr := leaseRow{held: heldLast}
		if err := r.Scan(&lr.message, &lr.sender, &lr.attempts); err != nil {
			return err
		}
		rows = append(rows, lr)
		return nil
	}, qSweepSelect+e.dia.forUpdate(), tenant, holder, now, stInbox)
	if err != nil || len(rows) == 0 {
		return err
	}
	return e.deadLetterLeased(ctx, q, holder, own, rows, now)
}

// deadLetterLeased makes rows, leased messages in holder's inboxes whose last lease ended, dead
// letters of holder with ReasonMaxAttempts and their attempt counts (the recipient's, unlike
// Collect's drops: holder stays, recipient is holder). The ledger row itself moves (ord 0, the
// next dead-letter number in seq), so the delivery keeps exactly one entry. The dead-letter bound
// applies as to Collect's drops (boundDead, eviction counted); the inboxes lose them as they lose
// a popped message (leaveInbox: an emptied inbox of a departed sender is reclaimed). Every
// statement runs at once: the caller's transaction may read what they change (UnregisterIf's
// snapshot, PopIf's inbox count). The caller holds holder's row lock and the rows' locks.
func (e *Engine) deadLetterLeased(ctx context.Context, q Querier, holder string, own *recipientRow, rows []leaseRow, now int64) error {
	run := execNow(q)
	nextDead := own.nextDead
	bySender := map[string]int64{}
	var senders []string
	for _, r := range rows {
		nextDead++
		if err := run(ctx, `UPDATE exchange_ledger SET state = ?, ord = 0, seq = ?, reason = ?, dead_at = ?, held = 0, visible_at = 0
			WHERE tenant = ? AND message = ? AND recipient = ?`, stDead, nextDead, int64(exchange.ReasonMaxAttempts), now, tenant, r.message, holder); err != nil {
			return err
		}
		if _, ok := bySender[r.sender]; !ok {
			senders = append(senders, r.sender)
		}
		bySender[r.sender]++
	}
	for _, sender := range senders {
		count, err := inboxCount(ctx, q, holder, sender)
		if err != nil {
			return err
		}
		if err := e.leaveInbox(ctx, q, run, holder, sender, count, bySender[sender]); err != nil {
			return err
		}
	}
	held := own.dead + int64(len(rows))
	if err := e.boundDead(ctx, run, holder, nextDead, held, 0, int64(len(rows)), now); err != nil {
		return err
	}
	own.nextDead, own.dead = nextDead, min(held, int64(e.set.MaxDeadLetters))
	return countDeadLettered(ctx, run, len(rows))
}
