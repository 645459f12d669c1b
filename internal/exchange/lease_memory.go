package exchange

import (
	"errors"
	"time"

	"github.com/google/uuid"
)

// errLeaseNotBuilt marks the memory engine's lease calls before issue 18's implementation lands.
// TODO(issue 18): replaced by the memory engine's leases; nothing may ship with it.
var errLeaseNotBuilt = errors.New("leases: not built yet (issue 18 in progress)")

// Lease leases visible messages of req.Owner's inboxes (lease.go).
func (x *Exchange) Lease(req LeaseRequest) (LeaseResult, error) {
	return LeaseResult{}, errLeaseNotBuilt
}

// Ack removes the message of a held lease (lease.go).
func (x *Exchange) Ack(owner uuid.UUID, r Receipt) error { return errLeaseNotBuilt }

// Nack ends a held lease (lease.go).
func (x *Exchange) Nack(owner uuid.UUID, r Receipt, delay time.Duration) (bool, error) {
	return false, errLeaseNotBuilt
}

// ExtendLease moves a held lease's deadline (lease.go).
func (x *Exchange) ExtendLease(owner uuid.UUID, r Receipt, d time.Duration) (time.Time, error) {
	return time.Time{}, errLeaseNotBuilt
}
