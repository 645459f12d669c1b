package exchangedb

import (
	"context"

	"github.com/google/uuid"
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
