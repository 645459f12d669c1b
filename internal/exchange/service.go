package exchange

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Service is the Exchange as ExchangeService serves it, whatever keeps the mail (ADR-0006 D5;
// docs/design.md#storage-engines: each engine keeps the Exchange beside the history). The memory
// engine is *Exchange behind Memory; the SQLite and PostgreSQL engines keep owners, outboxes,
// inboxes, dead letters and request ids in their database, so mail survives a restart and every
// replica over one PostgreSQL is one post office.
//
// Every method means what the *Exchange method of the same name documents; the ctx and the error
// are the engine's: a database engine answers a storage fault with an error wrapping
// store.ErrStorageUnavailable (or another store sentinel), and honours ctx's deadline. The memory
// engine never fails for those reasons. The conformance suite (exchangetest.Run) holds every
// engine to the same answers.
type Service interface {
	// Register creates owner's flow (ErrOwnerAlreadyRegistered if it exists), with the lease
	// settings given (at most one; none or zero fields: the Exchange's defaults).
	Register(ctx context.Context, owner uuid.UUID, settings ...OwnerSettings) (*Snapshot, error)
	// UnregisterIf removes owner if check, given what it holds, returns nil, and returns that.
	UnregisterIf(ctx context.Context, owner uuid.UUID, check func(*Snapshot) error) (*Snapshot, bool, error)
	// Get returns what owner holds, false when it is not registered.
	Get(ctx context.Context, owner uuid.UUID) (*Snapshot, bool, error)
	// Owners pages the registered owners in registration order.
	Owners(ctx context.Context, after uint64, limit int) (OwnersPage, error)
	// Remembered answers a repeat of a Send request id, before any other check.
	Remembered(ctx context.Context, sender uuid.UUID, requestID string, req *SendRequest) (*envelope.Message, bool, error)
	// Send queues a base Message in the sender's outbox.
	Send(ctx context.Context, req SendRequest) (*envelope.Message, error)
	// Collect drains owner's outbox and routes each message, reporting as o asks.
	Collect(ctx context.Context, owner uuid.UUID, o ReportOptions) (*Report, error)
	// CollectAll collects every owner of a snapshot, in registration order. An owner whose collect
	// fails does not stop the others: the first such error is returned after every owner's turn.
	CollectAll(ctx context.Context, o ReportOptions) (*AllReport, error)
	// ReceivePage pages owner's inboxes without removing anything.
	ReceivePage(ctx context.Context, owner uuid.UUID, sender *uuid.UUID, after Cursor, limit int) (ReceivedPage, error)
	// PopIf removes the oldest message of sender's inbox at owner if check returns nil.
	PopIf(ctx context.Context, owner, sender uuid.UUID, check func(*envelope.Message) error) (*envelope.Message, bool, error)
	// DeadLetters pages owner's dead letters.
	DeadLetters(ctx context.Context, owner uuid.UUID, after uint64, limit int) (DeadLetterPage, error)
	// Subscribe starts a live subscription to owner's inboxes; the caller must call the function.
	Subscribe(ctx context.Context, owner uuid.UUID, sender *uuid.UUID, opts ...SubscribeOption) (*Subscription, func(), error)
	// Lease leases visible messages of owner's inboxes (lease.go has the rules);
	// ErrOwnerNotRegistered for an owner not registered.
	Lease(ctx context.Context, req LeaseRequest) (LeaseResult, error)
	// Ack removes the message of a held lease; ErrLeaseStale when the lease is no longer held,
	// ErrOwnerNotRegistered when owner is not registered.
	Ack(ctx context.Context, owner uuid.UUID, r Receipt) error
	// Nack ends a held lease, hiding the message for delay (>= 0), or makes it a dead letter when
	// its attempts reached the owner's MaxAttempts (deadLettered); errors as Ack.
	Nack(ctx context.Context, owner uuid.UUID, r Receipt, delay time.Duration) (deadLettered bool, err error)
	// Release gives back a lease the caller took but never handed out (a Lease response cut to
	// fit its budget, a stream frame too large to send): the attempt is undone, as if the lease
	// had not been taken, and the message is visible at once; it never makes a dead letter.
	// Errors as Ack. A lease whose receipt may have reached a client is Nacked or left to expire
	// instead, since its attempt number may be in use.
	Release(ctx context.Context, owner uuid.UUID, r Receipt) error
	// ExtendLease sets a held lease's deadline to now + d and returns it; errors as Ack.
	ExtendLease(ctx context.Context, owner uuid.UUID, r Receipt, d time.Duration) (time.Time, error)
	// Stats reads what the Exchange holds, for metrics.
	Stats(ctx context.Context) (Stats, error)
	// Close stops background work and ends live subscriptions with ErrClosed; what owners hold
	// stays readable. Safe to call more than once.
	Close() error
}

// Memory returns the memory engine's Service: an *Exchange built by New(opts...). Nothing it holds
// survives the process.
func Memory(opts ...Option) *MemoryService { return &MemoryService{X: New(opts...)} }

// MemoryService is *Exchange as a Service. Its methods never fail for storage reasons and ignore
// ctx except where *Exchange takes one (CollectAll).
type MemoryService struct {
	// X is the Exchange served; tests and in-process users may call it directly.
	X *Exchange
}

var _ Service = (*MemoryService)(nil)

func (m *MemoryService) Register(_ context.Context, owner uuid.UUID, settings ...OwnerSettings) (*Snapshot, error) {
	return m.X.Register(owner, settings...)
}

func (m *MemoryService) UnregisterIf(_ context.Context, owner uuid.UUID, check func(*Snapshot) error) (*Snapshot, bool, error) {
	return m.X.UnregisterIf(owner, check)
}

func (m *MemoryService) Get(_ context.Context, owner uuid.UUID) (*Snapshot, bool, error) {
	s, ok := m.X.Get(owner)
	return s, ok, nil
}

func (m *MemoryService) Owners(_ context.Context, after uint64, limit int) (OwnersPage, error) {
	return m.X.Owners(after, limit), nil
}

func (m *MemoryService) Remembered(_ context.Context, sender uuid.UUID, requestID string, req *SendRequest) (*envelope.Message, bool, error) {
	msg, ok := m.X.Remembered(sender, requestID, req)
	return msg, ok, nil
}

func (m *MemoryService) Send(_ context.Context, req SendRequest) (*envelope.Message, error) {
	return m.X.Send(req)
}

func (m *MemoryService) Collect(_ context.Context, owner uuid.UUID, o ReportOptions) (*Report, error) {
	return m.X.CollectWith(owner, o)
}

func (m *MemoryService) CollectAll(ctx context.Context, o ReportOptions) (*AllReport, error) {
	return m.X.CollectAll(ctx, o)
}

func (m *MemoryService) ReceivePage(_ context.Context, owner uuid.UUID, sender *uuid.UUID, after Cursor, limit int) (ReceivedPage, error) {
	return m.X.ReceivePage(owner, sender, after, limit), nil
}

func (m *MemoryService) PopIf(_ context.Context, owner, sender uuid.UUID, check func(*envelope.Message) error) (*envelope.Message, bool, error) {
	return m.X.PopIf(owner, sender, check)
}

func (m *MemoryService) DeadLetters(_ context.Context, owner uuid.UUID, after uint64, limit int) (DeadLetterPage, error) {
	return m.X.DeadLetters(owner, after, limit), nil
}

func (m *MemoryService) Subscribe(_ context.Context, owner uuid.UUID, sender *uuid.UUID, opts ...SubscribeOption) (*Subscription, func(), error) {
	return m.X.Subscribe(owner, sender, opts...)
}

func (m *MemoryService) Lease(_ context.Context, req LeaseRequest) (LeaseResult, error) {
	return m.X.Lease(req)
}

func (m *MemoryService) Ack(_ context.Context, owner uuid.UUID, r Receipt) error {
	return m.X.Ack(owner, r)
}

func (m *MemoryService) Nack(_ context.Context, owner uuid.UUID, r Receipt, delay time.Duration) (bool, error) {
	return m.X.Nack(owner, r, delay)
}

func (m *MemoryService) Release(_ context.Context, owner uuid.UUID, r Receipt) error {
	return m.X.Release(owner, r)
}

func (m *MemoryService) ExtendLease(_ context.Context, owner uuid.UUID, r Receipt, d time.Duration) (time.Time, error) {
	return m.X.ExtendLease(owner, r, d)
}

func (m *MemoryService) Stats(context.Context) (Stats, error) { return m.X.Stats(), nil }

func (m *MemoryService) Close() error {
	m.X.Close()
	return nil
}
