package exchangedb

import (
	"context"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// What plan_test.go, prune_test.go and lease_test.go reach inside the package for: the statements
// whose plans are checked, with the values of their arguments, the pruning chunk and the stored
// lease settings.
var (
	ReceivePageQuery = receivePageQuery
	LeaseQuery       = leaseQuery
	LeaseLeft        = leaseLeft
	QLeaseHidden     = qLeaseHidden
	StInbox          = stInbox
	StPopped         = stPopped
	StAcked          = stAcked
	StReturned       = stReturned
	StEvicted        = stEvicted
)

const (
	Tenant               = tenant
	QOutboxIDs           = qOutboxIDs
	QPruneSelect         = qPruneSelect
	QPruneRow            = qPruneRow
	QPruneMessage        = qPruneMessage
	QPruneRequestsSelect = qPruneRequestsSelect
	QPruneRequest        = qPruneRequest
	QPopVisible          = qPopVisible
	QDue                 = qDue
	QSweepSelect         = qSweepSelect
	QOutboxSQLite        = qOutboxSQLite
	StOutbox             = stOutbox
)

// SetPruneChunk sets pruneChunk until the returned function restores it.
func SetPruneChunk(n int) (restore func()) {
	old := pruneChunk
	pruneChunk = n
	return func() { pruneChunk = old }
}

// StoredSettings reads owner's lease settings as its row keeps them (0: the defaults), for
// lease_test.go's bounds.
func (e *Engine) StoredSettings(ctx context.Context, owner uuid.UUID) (maxAttempts, visibilityNs int64, err error) {
	err = e.d.Read(ctx, func(ctx context.Context, q Querier) error {
		return q.QueryRow(ctx, `SELECT max_attempts, visibility_ns FROM exchange_owners WHERE tenant = ? AND owner = ?`, tenant, owner.String()).
			Scan(&maxAttempts, &visibilityNs)
	})
	return maxAttempts, visibilityNs, err
}

// DispatchIdle reports whether e's dispatcher has dispatched every wake-up given so far and runs
// no dispatch.
func DispatchIdle(e *Engine) bool { return e.subs.idle() }

// SetSentCacheSize sets the sent caches' bound on their count until restore is called.
func SetSentCacheSize(n int) (restore func()) {
	old := sentCacheSize
	sentCacheSize = n
	return func() { sentCacheSize = old }
}

// QueueUnchecked queues a message from sender to the plain-string recipient as a Send of an
// earlier version did, without Send's checks: a recipient holding U+0000, which Send refuses now
// (docs/decisions/0012 row 24), for nul_test.go's outboxes written before.
func (e *Engine) QueueUnchecked(ctx context.Context, sender uuid.UUID, recipient string) (uuid.UUID, error) {
	m, err := envelope.New(envelope.KindGeneric, jsonv.ObjectValue(
		jsonv.Member{Key: "sender", Value: envelope.IDParticipant(sender).JSON()},
		jsonv.Member{Key: "recipient", Value: jsonv.StringValue(recipient)},
		jsonv.Member{Key: "content", Value: jsonv.StringValue("queued before")}))
	if err != nil {
		return uuid.Nil, err
	}
	body, err := encodeMessage(m)
	if err != nil {
		return uuid.Nil, err
	}
	return m.ID, e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		var seq int64
		if err := q.QueryRow(ctx, `UPDATE exchange_owners SET next_seq = next_seq + 1, queued = queued + 1 WHERE tenant = ? AND owner = ? RETURNING next_seq`,
			tenant, sender.String()).Scan(&seq); err != nil {
			return err
		}
		if _, err := q.Exec(ctx, `INSERT INTO exchange_messages (tenant, id, sender, body, known) VALUES (?, ?, ?, ?, 0)`,
			tenant, m.ID.String(), sender.String(), body); err != nil {
			return err
		}
		_, err := q.Exec(ctx, `INSERT INTO exchange_ledger (tenant, message, recipient, sender, state, holder, seq) VALUES (?, ?, '', ?, ?, ?, ?)`,
			tenant, m.ID.String(), sender.String(), stOutbox, sender.String(), seq)
		return err
	}, nil)
}

// DamageBody overwrites message id's stored body with text that is not JSON: a collect of its
// outbox then fails (store.ErrStorageDamaged) every time.
func (e *Engine) DamageBody(ctx context.Context, id uuid.UUID) error {
	if e.sent != nil {
		e.sent.take(id)
	}
	return e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		_, err := q.Exec(ctx, `UPDATE exchange_messages SET body = 'not json' WHERE tenant = ? AND id = ?`, tenant, id.String())
		return err
	}, nil)
}

// ForgeOldNULRecord makes the request record of (sender, requestID) look like one an earlier
// version wrote for a Send whose channel held U+0000 (sqlite stored it), and forgets its message
// (consumed and pruned).
func (e *Engine) ForgeOldNULRecord(ctx context.Context, sender uuid.UUID, requestID string, msg uuid.UUID) error {
	if e.sent != nil {
		e.sent.take(msg)
	}
	return e.d.Write(ctx, func(ctx context.Context, q Querier) error {
		if _, err := q.Exec(ctx, `UPDATE exchange_requests SET channel = ? WHERE tenant = ? AND sender = ? AND request_id = ?`, "c\x00", tenant, sender.String(), requestID); err != nil {
			return err
		}
		if _, err := q.Exec(ctx, `DELETE FROM exchange_ledger WHERE tenant = ? AND message = ?`, tenant, msg.String()); err != nil {
			return err
		}
		_, err := q.Exec(ctx, `DELETE FROM exchange_messages WHERE tenant = ? AND id = ?`, tenant, msg.String())
		return err
	}, nil)
}
