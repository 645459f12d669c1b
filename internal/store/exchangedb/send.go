package exchangedb

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// Send queues a base Message in the sender's outbox, in one transaction with its ledger row (state
// outbox) and, with a request id, its request record: an acknowledged Send is in the database.
// Checks in the memory engine's order: the request id's length, a repeat (answered even after
// Close, as the memory engine does), Close, the sender, the message, the outbox bound.
func (e *Engine) Send(ctx context.Context, req exchange.SendRequest) (*envelope.Message, error) {
	if err := exchange.CheckRequestID(req.RequestID); err != nil {
		return nil, err
	}
	if req.RequestID != "" {
		if m, ok, err := e.Remembered(ctx, req.Sender, req.RequestID, &req); err != nil || ok {
			return m, err
		}
	}
	if e.closed.Load() {
		return nil, exchange.ErrClosed
	}
	// The message is built and encoded before the transaction (on SQLite its statements run on
	// the single writer, which all writes wait for), once, as the transaction may run more than
	// once; an invalid message is reported after the sender's check, in the memory engine's
	// order.
	m, mErr := exchange.NewMessage(req)
	var body string
	if mErr == nil {
		body, mErr = encodeMessage(m)
	}
	var answer *envelope.Message
	sender := req.Sender.String()
	if req.RequestID == "" && mErr == nil && e.dia == Postgres {
		switch err := e.sendInOne(ctx, req, m, body); {
		case err == nil:
			if e.bg != nil {
				e.bg.note(req.Sender)
			}
			return m, nil
		case !isGuardRefusal(err):
			return nil, err
		}
		// Not registered, or the outbox full: nothing was applied; the statements below say
		// which, in a transaction of their own.
	}
	err := e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		answer = nil
		if req.RequestID != "" {
			var err error
			if answer, err = e.sendRequest(ctx, q, &req, m, mErr); err != nil || answer != nil {
				return err
			}
		}
		// The counters first (the sender's row is locked from here): it is the check that the
		// sender is registered, the message's flow number and the outbox bound. A Send that fails
		// its checks writes nothing (SQLite runs the Exchange's writes without a savepoint: one
		// that failed after it wrote would roll back the writes batched with it, which then run
		// again), so the update takes a place in the outbox only when there is one, and
		// sendRefused says why not.
		if mErr != nil {
			return e.sendRefused(ctx, q, req.Sender, mErr)
		}
		var seq, queued int64
		for try := 0; ; try++ {
			err := q.QueryRow(ctx, `UPDATE exchange_owners SET next_seq = next_seq + 1, queued = queued + 1
				WHERE tenant = ? AND owner = ? AND (? <= 0 OR queued < ?) RETURNING next_seq, queued`,
				tenant, sender, int64(e.set.MaxOutbox), int64(e.set.MaxOutbox)).Scan(&seq, &queued)
			if err == nil {
				break
			}
			if !q.IsNoRows(err) {
				return err
			}
			if err := e.sendRefused(ctx, q, req.Sender, nil); err != nil {
				return err
			}
			// A place was made between the two statements (PostgreSQL: a collect committed):
			// the row is locked now, and the update takes it.
			if try > 0 {
				return fmt.Errorf("exchangedb: the outbox of %s has room but its counters did not update", sender)
			}
		}
		// known (the direct recipient is registered now) is read by the insert itself: one
		// statement, which PostgreSQL sends with the COMMIT.
		if id, ok := req.Recipient.ID(); ok {
			if err := q.Defer(ctx, `INSERT INTO exchange_messages (tenant, id, sender, body, known) VALUES (?, ?, ?, ?,
				CASE WHEN EXISTS (SELECT 1 FROM exchange_owners WHERE tenant = ? AND owner = ?) THEN 1 ELSE 0 END)`,
				tenant, m.ID.String(), sender, body, tenant, id.String()); err != nil {
				return err
			}
		} else if err := q.Defer(ctx, `INSERT INTO exchange_messages (tenant, id, sender, body, known) VALUES (?, ?, ?, ?, 0)`,
			tenant, m.ID.String(), sender, body); err != nil {
			return err
		}
		return q.Defer(ctx, `INSERT INTO exchange_ledger (tenant, message, recipient, sender, state, holder, seq)
			VALUES (?, ?, '', ?, ?, ?, ?)`, tenant, m.ID.String(), sender, stOutbox, sender, seq)
	}, nil)
	if err != nil {
		return nil, err
	}
	if answer != nil {
		return answer, nil
	}
	if e.sent != nil {
		e.sent.put(m, len(body))
	}
	if e.bg != nil {
		e.bg.note(req.Sender)
	}
	return m, nil
}

// sendInOne is a Send without a request id on PostgreSQL in one round trip: its statements go
// out with BEGIN and COMMIT in one batch (Querier.Defer). The counter update and the outbox row
// are one statement, the ledger row taking its seq from the update's RETURNING (a
// data-modifying WITH): NULL when the update changed nothing (the sender is not registered) or
// took the outbox past its bound, and then the ledger's NOT NULL refuses the row and the whole
// transaction (isGuardRefusal), and the Send runs again the statements that tell which, in a
// transaction of their own, as the memory engine would answer. The message's INSERT is the
// next statement, with a snapshot of its own (READ COMMITTED), so its `known` is still read once
// the sender's row is locked, as when the update's answer came back first. Issue 17's
// benchmark: the sender's row lock is held for one round trip instead of two, and a Send is one
// batch and two statements instead of two and three (a Send+Collect round: 4 round trips).
func (e *Engine) sendInOne(ctx context.Context, req exchange.SendRequest, m *envelope.Message, body string) error {
	sender := req.Sender.String()
	return e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		if err := q.Defer(ctx, `WITH o AS (UPDATE exchange_owners SET next_seq = next_seq + 1, queued = queued + 1
				WHERE tenant = ? AND owner = ? RETURNING next_seq, queued)
			INSERT INTO exchange_ledger (tenant, message, recipient, sender, state, holder, seq)
			VALUES (?, ?, '', ?, ?, ?, (SELECT o.next_seq FROM o WHERE ?::bigint <= 0 OR o.queued <= ?::bigint))`,
			tenant, sender, tenant, m.ID.String(), sender, stOutbox, sender, int64(e.set.MaxOutbox), int64(e.set.MaxOutbox)); err != nil {
			return err
		}
		if id, ok := req.Recipient.ID(); ok {
			return q.Defer(ctx, `INSERT INTO exchange_messages (tenant, id, sender, body, known) VALUES (?, ?, ?, ?,
				CASE WHEN EXISTS (SELECT 1 FROM exchange_owners WHERE tenant = ? AND owner = ?) THEN 1 ELSE 0 END)`,
				tenant, m.ID.String(), sender, body, tenant, id.String())
		}
		return q.Defer(ctx, `INSERT INTO exchange_messages (tenant, id, sender, body, known) VALUES (?, ?, ?, ?, 0)`,
			tenant, m.ID.String(), sender, body)
	}, nil)
}

// isGuardRefusal reports sendInOne's refusal: a NOT NULL violation (SQLSTATE 23502), which no
// other statement of its batch can raise.
func isGuardRefusal(err error) bool {
	var st interface{ SQLState() string }
	return errors.As(err, &st) && st.SQLState() == "23502"
}

// sendRefused says why a Send takes no place in the sender's outbox, reading the sender's row
// (locked, as the counter update would lock it): not registered, else mErr (the message is
// invalid), else a full outbox; nil when there is room after all (only PostgreSQL's concurrent
// collects make one).
func (e *Engine) sendRefused(ctx context.Context, q Querier, sender uuid.UUID, mErr error) error {
	var queued int64
	if err := q.QueryRow(ctx, `SELECT queued FROM exchange_owners WHERE tenant = ? AND owner = ?`+e.dia.forNoKeyUpdate(),
		tenant, sender.String()).Scan(&queued); err != nil {
		if q.IsNoRows(err) {
			return ownerErr("Sender", sender, exchange.ErrOwnerNotRegistered)
		}
		return err
	}
	if mErr != nil {
		return mErr
	}
	if e.set.MaxOutbox > 0 && queued >= int64(e.set.MaxOutbox) {
		return ownerErr("Sender", sender, &exchange.OutboxFullError{Queued: int(queued), Limit: e.set.MaxOutbox})
	}
	return nil
}

// sendRequest is the part of a Send with a request id before its counters: the expired records
// forgotten, the sender's row locked (as the counter update would lock it), so that Sends of one
// sender are serialised before the record's number is read ("MAX(n) + 1" then sees the previous
// Send's record, and two Sends never share a number: the per-sender window stays exact; review
// R10), then the record. A concurrent repeat that committed first is answered from its record
// (answer not nil: the transaction writes nothing else).
func (e *Engine) sendRequest(ctx context.Context, q Querier, req *exchange.SendRequest, m *envelope.Message, mErr error) (*envelope.Message, error) {
	sender := req.Sender.String()
	now := e.now()
	// Within the transaction again: a concurrent repeat on another replica waits for the first
	// one's record (the primary key) and answers from it.
	if _, err := q.Exec(ctx, `DELETE FROM exchange_requests WHERE tenant = ? AND sender = ? AND request_id = ? AND created_ns < ?`,
		tenant, sender, req.RequestID, now.Add(-e.set.RequestTTL).UnixNano()); err != nil {
		return nil, err
	}
	var reg int64
	if err := q.QueryRow(ctx, `SELECT reg_seq FROM exchange_owners WHERE tenant = ? AND owner = ?`+e.dia.forNoKeyUpdate(), tenant, sender).Scan(&reg); err != nil {
		if q.IsNoRows(err) {
			return nil, ownerErr("Sender", req.Sender, exchange.ErrOwnerNotRegistered)
		}
		return nil, err
	}
	if mErr != nil {
		return nil, mErr
	}
	rec := exchange.NewRequestRecord(req.Sender, m)
	var ch any
	if rec.Channel != nil {
		ch = *rec.Channel
	}
	n, err := q.Exec(ctx, `INSERT INTO exchange_requests (tenant, sender, request_id, n, created_ns, message, created_at, recipient, channel, digest)
		VALUES (?, ?, ?, (SELECT COALESCE(MAX(n), 0) + 1 FROM exchange_requests WHERE tenant = ? AND sender = ?), ?, ?, ?, ?, ?, ?)
		ON CONFLICT (tenant, sender, request_id) DO NOTHING`,
		tenant, sender, req.RequestID, tenant, sender, now.UnixNano(), m.ID.String(), formatFloat(m.CreatedAt),
		participantText(m.Recipient), ch, hex.EncodeToString(rec.Digest[:]))
	if err != nil {
		return nil, err
	}
	if n == 0 { // a concurrent repeat committed first
		a, ok, err := e.remembered(ctx, q, sender, req.RequestID, req)
		if err != nil {
			return nil, err
		}
		if ok {
			return a, nil
		}
		return nil, fmt.Errorf("exchangedb: request %q of %s: a record conflicts and cannot be read", req.RequestID, sender)
	}
	// The sender's own bound: the last RequestsPerSender ids.
	return nil, q.Defer(ctx, `DELETE FROM exchange_requests WHERE tenant = ? AND sender = ?
		AND n <= (SELECT MAX(n) FROM exchange_requests WHERE tenant = ? AND sender = ?) - ?`,
		tenant, sender, tenant, sender, int64(e.set.RequestsPerSender))
}

// Remembered answers a repeat of a Send request id within the request memory (TTL and the
// sender's count), before any other check.
func (e *Engine) Remembered(ctx context.Context, sender uuid.UUID, requestID string, req *exchange.SendRequest) (*envelope.Message, bool, error) {
	if requestID == "" || exchange.CheckRequestID(requestID) != nil {
		// Nothing is remembered under an id Send refuses (and PostgreSQL could not read one
		// holding NUL: SQLSTATE 22021).
		return nil, false, nil
	}
	var (
		m  *envelope.Message
		ok bool
	)
	err := e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		var err error
		m, ok, err = e.remembered(ctx, q, sender.String(), requestID, req)
		return err
	})
	return m, ok, err
}

func (e *Engine) remembered(ctx context.Context, q Querier, sender, requestID string, req *exchange.SendRequest) (*envelope.Message, bool, error) {
	var (
		created                        int64
		msgID, createdAt, rcpt, digest string
		channel, body                  nullString
	)
	err := q.QueryRow(ctx, `SELECT r.created_ns, r.message, r.created_at, r.recipient, r.channel, r.digest, m.body
		FROM exchange_requests r LEFT JOIN exchange_messages m ON m.tenant = r.tenant AND m.id = r.message
		WHERE r.tenant = ? AND r.sender = ? AND r.request_id = ?`, tenant, sender, requestID).
		Scan(&created, &msgID, &createdAt, &rcpt, &channel, &digest, &body)
	if err != nil {
		if q.IsNoRows(err) {
			return nil, false, nil
		}
		return nil, false, err
	}
	if e.now().Sub(timeOfNanos(created)) > e.set.RequestTTL {
		return nil, false, nil
	}
	var rec exchange.RequestRecord
	if rec.MsgID, err = parseUUID(msgID); err != nil {
		return nil, false, err
	}
	if rec.Sender, err = parseUUID(sender); err != nil {
		return nil, false, err
	}
	if rec.CreatedAt, err = strconv.ParseFloat(createdAt, 64); err != nil {
		return nil, false, damaged("exchangedb: a stored created_at %q: %w", createdAt, err)
	}
	rec.Recipient = participantFromText(rcpt)
	if channel.Valid {
		c := channel.String
		rec.Channel = &c
	}
	d, err := hex.DecodeString(digest)
	if err != nil || len(d) != len(rec.Digest) {
		return nil, false, damaged("exchangedb: a stored digest %q", digest)
	}
	copy(rec.Digest[:], d)
	var held *envelope.Message
	if body.Valid {
		if held, err = decodeMessage(body.String); err != nil {
			return nil, false, err
		}
	}
	return rec.Answer(held, req), true, nil
}
