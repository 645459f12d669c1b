package exchangedb

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/exchange"
)

// TODO(issue 18): replaced by the database engines' leases; nothing may ship with it.
var errLeaseNotBuilt = errors.New("leases: not built yet (issue 18 in progress)")

// Lease leases visible messages of req.Owner's inboxes (exchange/lease.go).
func (e *Engine) Lease(ctx context.Context, req exchange.LeaseRequest) (exchange.LeaseResult, error) {
	return exchange.LeaseResult{}, errLeaseNotBuilt
}

// Ack removes the message of a held lease.
func (e *Engine) Ack(ctx context.Context, owner uuid.UUID, r exchange.Receipt) error {
	return errLeaseNotBuilt
}

// Nack ends a held lease.
func (e *Engine) Nack(ctx context.Context, owner uuid.UUID, r exchange.Receipt, delay time.Duration) (bool, error) {
	return false, errLeaseNotBuilt
}

// ExtendLease moves a held lease's deadline.
func (e *Engine) ExtendLease(ctx context.Context, owner uuid.UUID, r exchange.Receipt, d time.Duration) (time.Time, error) {
	return time.Time{}, errLeaseNotBuilt
}
