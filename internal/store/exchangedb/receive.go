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
// inbox when sender is not nil. An owner that is not registered has none.
func (e *Engine) ReceivePage(ctx context.Context, owner uuid.UUID, sender *uuid.UUID, after exchange.Cursor, limit int) (exchange.ReceivedPage, error) {
	var page exchange.ReceivedPage
	err := e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		page = exchange.ReceivedPage{}
		query := receivePageQuery(sender != nil, limit > 0)
		args := []any{tenant, owner.String(), stInbox, int64(after.Inbox), int64(after.Seq)}
		if sender != nil {
			args = append(args, sender.String())
		}
		if limit > 0 {
			args = append(args, int64(limit)+1)
		}
		return collect(ctx, q, func(r Rows) error {
			var (
				ord, seq int64
				body     string
			)
			if err := r.Scan(&ord, &seq, &body); err != nil {
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
			return nil
		}, query, args...)
	})
	return page, err
}

// PopIf removes the oldest message of sender's inbox at owner if check returns nil; an error from
// check is returned and the message stays (the transaction rolls back). The owner's row is locked
// first (FOR NO KEY UPDATE, the order Collect locks in), so pops of one owner, on any replica, are
// serialised: two never hand out the same message. The Pop that empties the inbox of a sender no
// longer registered reclaims it; the sender's row is read FOR KEY SHARE for that (see below).
func (e *Engine) PopIf(ctx context.Context, owner, sender uuid.UUID, check func(*envelope.Message) error) (*envelope.Message, bool, error) {
	var (
		msg *envelope.Message
		ok  bool
	)
	oid, sid := owner.String(), sender.String()
	err := e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		msg, ok = nil, false
		var one int64
		if err := q.QueryRow(ctx, `SELECT 1 FROM exchange_owners WHERE tenant = ? AND owner = ?`+e.dia.forNoKeyUpdate(), tenant, oid).Scan(&one); err != nil {
			if q.IsNoRows(err) {
				return nil
			}
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
		if err := q.QueryRow(ctx, `SELECT l.message, m.body FROM exchange_ledger l JOIN exchange_messages m ON m.tenant = l.tenant AND m.id = l.message
			WHERE l.tenant = ? AND l.holder = ? AND l.state = ? AND l.ord = ? ORDER BY l.seq LIMIT 1`, tenant, oid, stInbox, ord).Scan(&id, &body); err != nil {
			return err // the count says there is one: a missing row is a fault
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
		if err := q.Defer(ctx, `UPDATE exchange_ledger SET state = ?, done_at = ? WHERE tenant = ? AND message = ? AND recipient = ?`,
			stPopped, e.now().UnixNano(), tenant, id, oid); err != nil {
			return err
		}
		if err := q.Defer(ctx, `UPDATE exchange_owners SET inbox = inbox - 1 WHERE tenant = ? AND owner = ?`, tenant, oid); err != nil {
			return err
		}
		reclaim := false
		if count == 1 {
			// The sender's row is locked against deletion (FOR KEY SHARE), so this Pop and the
			// sender's Unregister are ordered, and either reclaims the emptied inbox: if the
			// Unregister committed first, the row is gone here; if it comes later, it waits for
			// this commit and its "count = 0" delete sees the inbox empty. A plain read let an
			// Unregister commit between this check and the count update: an empty inbox of a
			// departed sender, never reclaimed (review R1). KEY SHARE does not conflict with the
			// NO KEY UPDATE locks Collect, Send and Pop take, so no new wait among them.
			err := q.QueryRow(ctx, `SELECT 1 FROM exchange_owners WHERE tenant = ? AND owner = ?`+e.dia.forKeyShare(), tenant, sid).Scan(&one)
			switch {
			case q.IsNoRows(err):
				reclaim = true
			case err != nil:
				return err
			}
		}
		if reclaim {
			err = q.Defer(ctx, `DELETE FROM exchange_inboxes WHERE tenant = ? AND owner = ? AND sender = ?`, tenant, oid, sid)
		} else {
			err = q.Defer(ctx, `UPDATE exchange_inboxes SET count = count - 1 WHERE tenant = ? AND owner = ? AND sender = ?`, tenant, oid, sid)
		}
		if err != nil {
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

// DeadLetters pages owner's dead letters; an owner that is not registered has none.
func (e *Engine) DeadLetters(ctx context.Context, owner uuid.UUID, after uint64, limit int) (exchange.DeadLetterPage, error) {
	var page exchange.DeadLetterPage
	err := e.d.Read(ctx, func(ctx context.Context, q Querier) error {
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
