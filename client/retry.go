package client

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// readOnly are the unary methods that change nothing, so retrying them is always safe. The other
// methods are retried only when their request has a request_id (every mutation of HistoryService,
// and ExchangeService.Send): the retry reuses it and the server applies the call once, or when they
// are settlements (below). Register, Unregister, Collect, CollectAll, PopMessage and Lease have none
// and are never retried: a retry after a lost response would pop a second message, report an empty
// collect for a delivered one, or lease more messages (the lost ones hidden until their deadline,
// an attempt spent).
var readOnly = map[string]bool{
	"/historyd.v1.HistoryService/GetBranch":        true,
	"/historyd.v1.HistoryService/ListBranches":     true,
	"/historyd.v1.HistoryService/GetMessage":       true,
	"/historyd.v1.HistoryService/ListMessages":     true,
	"/historyd.v1.HistoryService/GetLastMessage":   true,
	"/historyd.v1.HistoryService/ToChatMessages":   true,
	"/historyd.v1.HistoryService/ExportBranch":     true,
	"/historyd.v1.ExchangeService/ListOwners":      true,
	"/historyd.v1.ExchangeService/Receive":         true,
	"/historyd.v1.ExchangeService/ListDeadLetters": true,
	"/grpc.health.v1.Health/Check":                 true,
}

// settlements are the lease calls a repeat cannot apply twice (issue 18): once Ack or Nack has
// ended a lease, its receipt is stale and a repeat is FAILED_PRECONDITION (ERROR_REASON_LEASE_STALE)
// that changes nothing; ExtendLease sets the deadline to now plus a duration, so a repeat sets it
// again. Retrying them after a lost response is safe, but its answer is then ambiguous: LEASE_STALE
// on a retried Ack may mean that the first attempt acknowledged the message.
var settlements = map[string]bool{
	"/historyd.v1.ExchangeService/Ack":         true,
	"/historyd.v1.ExchangeService/Nack":        true,
	"/historyd.v1.ExchangeService/ExtendLease": true,
}

// requestIDField is the idempotency key's field name in every request that has one (docs/development.md#style-proto
// "Mutations take an optional request_id").
const requestIDField protoreflect.Name = "request_id"

// retryInterceptor retries the calls the policy and readOnly allow, on UNAVAILABLE, and on
// DEADLINE_EXCEEDED while the caller's context is still alive (the attempt's own timeout ran out,
// or the server's). A mutation without a request_id gets a fresh UUID before the first attempt, in
// a copy of the request, so that every attempt carries the same one.
func retryInterceptor(p RetryPolicy) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if p.MaxAttempts <= 1 {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		req, ok := retryable(method, req)
		if !ok {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		for attempt := 1; ; attempt++ {
			err := invokeAttempt(ctx, p.PerAttemptTimeout, method, req, reply, cc, invoker, opts...)
			if err == nil || attempt >= p.MaxAttempts || !retryableError(ctx, err) {
				return err
			}
			if !sleep(ctx, p.backoff(attempt)) {
				return err // the last attempt's error says more than the context's
			}
		}
	}
}

// sleep pauses for d and reports true, or reports false as soon as ctx is done.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// invokeAttempt makes one attempt, bounded by timeout when it is positive.
func invokeAttempt(ctx context.Context, timeout time.Duration, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// retryable reports whether method may be retried, and returns the request every attempt sends:
// req itself, or a copy with a new request_id when req has an empty one.
func retryable(method string, req any) (any, bool) {
	if readOnly[method] || settlements[method] {
		return req, true
	}
	m, ok := req.(proto.Message)
	if !ok {
		return req, false
	}
	r := m.ProtoReflect()
	fd := r.Descriptor().Fields().ByName(requestIDField)
	if fd == nil || fd.Kind() != protoreflect.StringKind || fd.Cardinality() == protoreflect.Repeated {
		return req, false
	}
	if r.Get(fd).String() != "" {
		return req, true
	}
	c := proto.Clone(m)
	c.ProtoReflect().Set(fd, protoreflect.ValueOfString(uuid.NewString()))
	return c, true
}

// retryableError reports whether err is worth another attempt: UNAVAILABLE (the connection broke,
// or the server is shutting down), or DEADLINE_EXCEEDED while the caller's context is alive (so the
// attempt's timeout or the server's ran out, not the caller's deadline).
func retryableError(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	return false
}

// backoff is the pause after the given attempt (1-based): InitialBackoff × Multiplier^(attempt-1),
// at most MaxBackoff, jittered by ±Jitter.
func (p RetryPolicy) backoff(attempt int) time.Duration {
	mult := max(p.Multiplier, 1)
	d := float64(p.InitialBackoff)
	for i := 1; i < attempt && (p.MaxBackoff <= 0 || d < float64(p.MaxBackoff)); i++ {
		d *= mult
	}
	if p.MaxBackoff > 0 {
		d = min(d, float64(p.MaxBackoff))
	}
	j := min(max(p.Jitter, 0), 1)
	d *= 1 + j*(2*rand.Float64()-1) // #nosec G404: jitter needs no cryptographic randomness
	return time.Duration(d)
}
