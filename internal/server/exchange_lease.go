package server

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/types/known/durationpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// The lease RPCs (issue 18; internal/exchange/lease.go has the rules, exchange_service.proto the
// contract). The handlers are thin: validate, call the Exchange, convert. An Ack or Nack that
// succeeds wakes this server's leasing SubscribeInbox streams of the owner (exchange_lease_hub.go).

// Lease leases up to max_messages visible messages of the owner's inboxes. The batch is kept
// within the response budget twice: the Exchange stops it by LeaseRequest.MaxBytes (an estimate,
// leaseMaxBytes), then the converted leases are measured exactly; those that still do not fit are
// given back at once (exchange.Service.Release) and left out: never handed out, they are visible
// again and their attempt is not counted, so a cut never brings a message nearer its owner's
// max_attempts (issue 18 review M1). A first message that alone does not fit is given back
// likewise and the call is RESOURCE_EXHAUSTED (RESPONSE_TOO_LARGE, messageId), as PopMessage's:
// lease it with omit_rendered.
func (s *ExchangeServer) Lease(ctx context.Context, req *historyv1.LeaseRequest) (*historyv1.LeaseResponse, error) {
	owner, sender, err := parseInboxScope(req.GetOwnerId(), req.Sender)
	if err != nil {
		return nil, err
	}
	n, err := boundedCount("max_messages", req.GetMaxMessages(), 1, exchange.MaxLeaseBatch)
	if err != nil {
		return nil, err
	}
	vis, err := leaseDuration("visibility_timeout", req.GetVisibilityTimeout(), false)
	if err != nil {
		return nil, err
	}
	omit := req.GetOmitRendered()
	res, err := s.ex.Lease(ctx, exchange.LeaseRequest{Owner: owner, Sender: sender, Max: n,
		MaxBytes: s.leaseMaxBytes(omit), Visibility: vis})
	if err != nil {
		return nil, err
	}
	o := s.messageOut(omit)
	resp := &historyv1.LeaseResponse{NextVisibleTime: optionalTimestamp(res.NextVisible)}
	var overflow int
	resp.Leased, overflow = fitPage(res.Leases, func(l exchange.Leased) *historyv1.LeasedMessage {
		return leasedToProto(l, o)
	}, s.maxResponse)
	if overflow > 0 {
		kept := len(resp.Leased)
		s.releaseAll(ctx, owner, res.Leases[kept:])
		if kept == 0 {
			return nil, &exchangeResponseTooLargeError{size: overflow, limit: s.maxResponse,
				messageID: res.Leases[0].Message.ID.String(), what: "Lease's first message"}
		}
	}
	return resp, nil
}

// leaseMaxBytes is the LeaseRequest.MaxBytes that keeps a batch within the response budget:
// exchange.MessageSize bounds a message's encoding without its rendering, and a rendering is about
// as large as its message, so a rendered batch gets half the budget.
func (s *ExchangeServer) leaseMaxBytes(omitRendered bool) int64 {
	b := int64(s.maxResponse - pageFixedBytes)
	if !omitRendered {
		b /= 2
	}
	return max(b, 1)
}

// Ack ends a lease by removing its message.
func (s *ExchangeServer) Ack(ctx context.Context, req *historyv1.AckRequest) (*historyv1.AckResponse, error) {
	owner, r, err := parseLeaseRef(req.GetOwnerId(), req.GetReceipt())
	if err != nil {
		return nil, err
	}
	if err := s.ex.Ack(ctx, owner, r); err != nil {
		return nil, err
	}
	s.hub.notify(owner) // a leasing stream held at its max_in_flight has room
	return &historyv1.AckResponse{}, nil
}

// Nack ends a lease, the message visible again after the delay or a dead letter at max_attempts.
func (s *ExchangeServer) Nack(ctx context.Context, req *historyv1.NackRequest) (*historyv1.NackResponse, error) {
	owner, r, err := parseLeaseRef(req.GetOwnerId(), req.GetReceipt())
	if err != nil {
		return nil, err
	}
	delay, err := nackDelay(req.GetDelay())
	if err != nil {
		return nil, err
	}
	dead, err := s.ex.Nack(ctx, owner, r, delay)
	if err != nil {
		return nil, err
	}
	// The message may be visible now, or later: a leasing stream woken leases again and learns when.
	s.hub.notify(owner)
	return &historyv1.NackResponse{DeadLettered: dead}, nil
}

// ExtendLease moves a held lease's deadline to now plus visibility_timeout.
func (s *ExchangeServer) ExtendLease(ctx context.Context, req *historyv1.ExtendLeaseRequest) (*historyv1.ExtendLeaseResponse, error) {
	owner, r, err := parseLeaseRef(req.GetOwnerId(), req.GetReceipt())
	if err != nil {
		return nil, err
	}
	d, err := leaseDuration("visibility_timeout", req.GetVisibilityTimeout(), true)
	if err != nil {
		return nil, err
	}
	deadline, err := s.ex.ExtendLease(ctx, owner, r, d)
	if err != nil {
		return nil, err
	}
	return &historyv1.ExtendLeaseResponse{Deadline: optionalTimestamp(deadline)}, nil
}

// releaseAll gives back leases the server took but never handed out (exchange.Service.Release):
// a Lease batch cut to the response budget, a leasing stream's frame too large to send and the
// rest of its batch. They are visible at once rather than at their deadline, and their attempt is
// undone. A lease whose receipt may have reached the client (a frame whose Send failed) is never
// given back: its attempt number may be in use, so it is left to expire (at least once).
//
// It is best effort: a lease it cannot give back (the Exchange failing, or closed at shutdown)
// still ends at its deadline, which is the at-least-once rule anyway, its attempt then counted.
// ctx may be done (a stream whose client left): the Releases get a bounded context of their own.
// Streams of the owner on this server are woken, the messages being visible again.
func (s *ExchangeServer) releaseAll(ctx context.Context, owner uuid.UUID, leases []exchange.Leased) {
	if len(leases) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	released := false
	for _, l := range leases {
		if err := s.ex.Release(ctx, owner, l.Receipt); err == nil {
			released = true
		} else if ctx.Err() != nil {
			break
		}
	}
	if released {
		s.hub.notify(owner)
	}
}

// releaseTimeout bounds releaseAll: a database engine that does not answer in that time is left
// to the leases' deadlines.
const releaseTimeout = 5 * time.Second

// parseLeaseRef reads the owner_id and receipt of Ack, Nack and ExtendLease.
func parseLeaseRef(ownerID, receipt string) (uuid.UUID, exchange.Receipt, error) {
	owner, err := parseOwnerID("owner_id", ownerID)
	if err != nil {
		return uuid.Nil, exchange.Receipt{}, err
	}
	if receipt == "" {
		return uuid.Nil, exchange.Receipt{}, &FieldError{Field: "receipt", Err: fmt.Errorf("%w: required", envelope.ErrInvalid)}
	}
	r, err := exchange.ParseReceipt(receipt)
	if err != nil {
		return uuid.Nil, exchange.Receipt{}, &FieldError{Field: "receipt", Err: fmt.Errorf("%w: not a receipt of this server (LeasedMessage.receipt)", err)}
	}
	return owner, r, nil
}

// boundedCount reads a count field whose 0 means def and whose values must lie in 0..most:
// negative or larger is INVALID_ARGUMENT naming field (the proto says "at most").
func boundedCount(field string, n int32, def, most int) (int, error) {
	switch {
	case n < 0 || int(n) > most:
		return 0, &FieldError{Field: field, Err: fmt.Errorf("%w: must be between 0 (the default) and %d, got %d", envelope.ErrInvalid, most, n)}
	case n == 0:
		return def, nil
	}
	return int(n), nil
}

// leaseDuration reads a lease length: absent or zero is 0 (the default: the owner's, or the
// server's) unless required; anything else must lie in [exchange.MinVisibility,
// exchange.MaxVisibility]. Out of range or malformed is INVALID_ARGUMENT naming field.
func leaseDuration(field string, d *durationpb.Duration, required bool) (time.Duration, error) {
	v, err := durationField(field, d)
	switch {
	case err != nil:
		return 0, err
	case v == 0 && !required:
		return 0, nil
	case v < exchange.MinVisibility || v > exchange.MaxVisibility:
		return 0, &FieldError{Field: field, Err: fmt.Errorf("%w: must be between %v and %v, got %v",
			envelope.ErrInvalid, exchange.MinVisibility, exchange.MaxVisibility, v)}
	}
	return v, nil
}

// nackDelay reads Nack's delay: absent or zero is at once, and any delay up to
// exchange.MaxVisibility is taken as it is (exchange_service.proto says only "at most 12h"; issue
// 18 review N1: a delay under MinVisibility, the bound of a lease's length, is no error).
// Negative, longer or malformed is INVALID_ARGUMENT naming delay.
func nackDelay(d *durationpb.Duration) (time.Duration, error) {
	v, err := durationField("delay", d)
	if err != nil {
		return 0, err
	}
	if v > exchange.MaxVisibility {
		return 0, &FieldError{Field: "delay", Err: fmt.Errorf("%w: must be between 0 and %v, got %v",
			envelope.ErrInvalid, exchange.MaxVisibility, v)}
	}
	return v, nil
}

// durationField reads a google.protobuf.Duration; absent is 0, malformed or negative is
// INVALID_ARGUMENT naming field.
func durationField(field string, d *durationpb.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, &FieldError{Field: field, Err: fmt.Errorf("%w: %v", envelope.ErrInvalid, err)}
	}
	v := d.AsDuration()
	if v < 0 {
		return 0, &FieldError{Field: field, Err: fmt.Errorf("%w: must not be negative, got %v", envelope.ErrInvalid, v)}
	}
	return v, nil
}

// ownerSettingsFromProto reads Register's lease options (0 and absent: the server's defaults).
func ownerSettingsFromProto(req *historyv1.RegisterRequest) (exchange.OwnerSettings, error) {
	var os exchange.OwnerSettings
	var err error
	if os.MaxAttempts, err = boundedCount("max_attempts", req.GetMaxAttempts(), 0, exchange.MaxMaxAttempts); err != nil {
		return os, err
	}
	if os.Visibility, err = leaseDuration("visibility_timeout", req.GetVisibilityTimeout(), false); err != nil {
		return os, err
	}
	return os, nil
}
