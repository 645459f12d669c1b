package exchangedb

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

func isNotRegistered(err error) bool { return errors.Is(err, exchange.ErrOwnerNotRegistered) }

// ReceivePage pages owner's inboxes without removing anything: inboxes in creation order, each
// oldest first, after the cursor (the inbox ordinal and the flow insertion number), only sender's
// inbox when sender is not nil; leased messages are among them, with their lease states. An
// owner that is not registered has none. Expired last-attempt leases are swept first (sweep.go).
func (e *Engine) ReceivePage(ctx context.Context, owner uuid.UUID, sender *uuid.UUID, after exchange.Cursor, limit int) (exchange.ReceivedPage, error) {
	var page exchange.ReceivedPage
	err := e.readSwept(ctx, owner, func(ctx context.Context, q Querier) error {
		page = exchange.ReceivedPage{}
		leased := false
		query := receivePageQuery(sender != nil, limit > 0)
		args := []any{tenant, owner.String(), stInbox, int64(after.Inbox), int64(after.Seq)}
		if sender != nil {
			args = append(args, sender.String())
		}
		if limit > 0 {
			args = append(args, int64(limit)+1)
		}
		err := collect(ctx, q, func(r Rows) error {
			var (
				ord, seq, attempts, visibleAt, held int64
				body                                string
			)
			if err := r.Scan(&ord, &seq, &body, &attempts, &visibleAt, &held); err != nil {
				return err
			}
			if limit > 0 && len(page.Messages) == limit {
				page.More = true
				return nil
			}
			m, err := decodeMessage(body)
			if err != nil {
				return err
			}
			page.Messages = append(page.Messages, m)
			page.Next = exchange.Cursor{Inbox: uint64(ord), Seq: uint64(seq)}
			page.Cursors = append(page.Cursors, page.Next)
			info := leaseInfo(attempts, visibleAt, held)
			leased = leased || info.Attempts > 0
			page.Leases = append(page.Leases, info)
			return nil
		}, query, args...)
		if !leased {
			page.Leases = nil // nil when no message of the page was ever leased (exchange.ReceivedPage)
		}
		return err
	})
	return page, err
}

// qPopVisible is the oldest visible message of one inbox (lease.go: PopMessage takes the oldest
// visible message and never a hidden one): never leased (visible_at 0), or visible again since.
// held = 2 past its deadline is a last attempt waiting for its sweep, which the Pop ran first; the
// term keeps such a row out on any replica's clock. Args: tenant, holder, the inbox state, the
// inbox's ord, now. Bounded by exchange_ledger_by_holder (tenant, holder, state, ord) and read in
// seq order: hidden rows ahead of the first visible one are passed over (plan_test.go).
const qPopVisible = `SELECT l.message, m.body FROM exchange_ledger l JOIN exchange_messages m ON m.tenant = l.tenant AND m.id = l.message
			WHERE l.tenant = ? AND l.holder = ? AND l.state = ? AND l.ord = ? AND l.visible_at <= ? AND l.held < 2 ORDER BY l.seq LIMIT 1`

// PopIf removes the oldest visible message of sender's inbox at owner if check returns nil; an
// error from check is returned and the message stays (the transaction rolls back). A leased
// message, or one a Nack's delay hides, is passed over (issue 18). The owner's row is locked first
// (FOR NO KEY UPDATE, the order Collect locks in), so pops of one owner, on any replica, are
// serialised: two never hand out the same message; the row taken is locked too, skipping one a
// Lease is taking (FOR UPDATE SKIP LOCKED). The Pop that empties the inbox of a sender no longer
// registered reclaims it (leaveInbox). Expired last-attempt leases are swept first (sweep.go).
func (e *Engine) PopIf(ctx context.Context, owner, sender uuid.UUID, check func(*envelope.Message) error) (*envelope.Message, bool, error) {
	var (
		msg *envelope.Message
		ok  bool
	)
	oid, sid := owner.String(), sender.String()
	err := e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		msg, ok = nil, false
		now := e.now().UnixNano()
		if found, _, err := e.lockOwnerSwept(ctx, q, oid, e.dia.forNoKeyUpdate(), now); !found || err != nil {
			return err
		}
		var ord, count int64
		if err := q.QueryRow(ctx, `SELECT ord, count FROM exchange_inboxes WHERE tenant = ? AND owner = ? AND sender = ?`, tenant, oid, sid).Scan(&ord, &count); err != nil {
			if q.IsNoRows(err) {
				return nil
			}
			return err
		}
		if count == 0 {
			return nil
		}
		var id, body string
		if err := q.QueryRow(ctx, qPopVisible+e.dia.skipLocked("l"), tenant, oid, stInbox, ord, now).Scan(&id, &body); err != nil {
			if q.IsNoRows(err) {
				return nil // every message of the inbox is hidden (leased, or delayed by a Nack)
			}
			return err
		}
		m, err := decodeMessage(body)
		if err != nil {
			return err
		}
		if check != nil {
			if err := check(m); err != nil {
				return err
			}
		}
		if err := q.Defer(ctx, `UPDATE exchange_ledger SET state = ?, done_at = ?, held = 0, visible_at = 0 WHERE tenant = ? AND message = ? AND recipient = ?`,
			stPopped, now, tenant, id, oid); err != nil {
			return err
		}
		if err := q.Defer(ctx, `UPDATE exchange_owners SET inbox = inbox - 1 WHERE tenant = ? AND owner = ?`, tenant, oid); err != nil {
			return err
		}
		if err := e.leaveInbox(ctx, q, q.Defer, oid, sid, count, 1); err != nil {
			return err
		}
		msg, ok = m, true
		return nil
	}, nil)
	if err != nil {
		return nil, false, err
	}
	return msg, ok, nil
}

// leaveInbox takes n messages (popped, acknowledged or dead-lettered) off sender's inbox at owner,
// which held count: the one that empties the inbox of a sender no longer registered reclaims it.
// The caller holds owner's row lock (no other Pop, Ack or Collect of owner changes the count).
func (e *Engine) leaveInbox(ctx context.Context, q Querier, run execFunc, owner, sender string, count, n int64) error {
	reclaim := false
	if count == n {
		// The sender's row is locked against deletion (FOR KEY SHARE), so this call and the
		// sender's Unregister are ordered, and either reclaims the emptied inbox: if the
		// Unregister committed first, the row is gone here; if it comes later, it waits for
		// this commit and its "count = 0" delete sees the inbox empty. A plain read let an
		// Unregister commit between this check and the count update: an empty inbox of a
		// departed sender, never reclaimed (review R1). KEY SHARE does not conflict with the
		// NO KEY UPDATE locks Collect, Send and Pop take, so no new wait among them.
		var one int64
		err := q.QueryRow(ctx, `SELECT 1 FROM exchange_owners WHERE tenant = ? AND owner = ?`+e.dia.forKeyShare(), tenant, sender).Scan(&one)
		switch {
		case q.IsNoRows(err):
			reclaim = true
		case err != nil:
			return err
		}
	}
	if reclaim {
		return run(ctx, `DELETE FROM exchange_inboxes WHERE tenant = ? AND owner = ? AND sender = ?`, tenant, owner, sender)
	}
	return run(ctx, `UPDATE exchange_inboxes SET count = count - ? WHERE tenant = ? AND owner = ? AND sender = ?`, n, tenant, owner, sender)
}

// DeadLetters pages owner's dead letters; an owner that is not registered has none. Expired
// last-attempt leases are swept first (sweep.go): their dead letters are among them.
func (e *Engine) DeadLetters(ctx context.Context, owner uuid.UUID, after uint64, limit int) (exchange.DeadLetterPage, error) {
	var page exchange.DeadLetterPage
	err := e.readSwept(ctx, owner, func(ctx context.Context, q Querier) error {
		page = exchange.DeadLetterPage{}
		var evicted int64
		if err := q.QueryRow(ctx, `SELECT evicted FROM exchange_owners WHERE tenant = ? AND owner = ?`, tenant, owner.String()).Scan(&evicted); err != nil {
			if q.IsNoRows(err) {
				return nil
			}
			return err
		}
		letters, more, err := e.deadLetters(ctx, q, owner.String(), after, limit)
		page = exchange.DeadLetterPage{Letters: letters, More: more, Evicted: uint64(evicted)}
		return err
	})
	return page, err
}

// errNoRows marks a one-row read that found none, across a Read's boundary.
var errNoRows = errors.New("exchangedb: no rows")

func isNoRowsAny(err error) bool { return errors.Is(err, errNoRows) }
