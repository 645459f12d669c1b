package server

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// What a grpc.health.v1 call may cost (ADR-0009, review of health's exemption). Health needs no
// token, so with tokens on it is the one door open to anyone, and three things were unbounded
// behind it: a health call took its place from the shared in-flight budget, so 72 calls that sent
// their headers and never their body starved every authenticated call and the probes too; nothing
// bounded how long a call might wait for that body; and a Health.Watch kept its request's service
// name (up to --max-recv-msg-size) for the life of its stream, in no budget, with no limit on the
// number of streams.
//
// grpc-go has no per-method receive limit and reads a request before any code of ours sees its
// size, so a health request cannot be refused by size before it is read; what it may cost while
// it is read is charged instead (a place of --max-recv-msg-size), and what it may keep after is
// bounded by refusing it:
//
//   - a health call without a valid token, when tokens are on, reserves from the health pool only
//     (healthInflightCalls places), never from --max-inflight-bytes, and gives its place back once
//     its request is read (requestRead); a call with a valid token, or any call on a server without
//     tokens, reserves as before (the budget, then the pool);
//   - every health call's request must arrive within healthBodyTimeout of its headers, or its
//     stream is ended (CANCELED), giving its place back: a client cannot pin a place by sending
//     headers alone;
//   - a request whose service name is longer than healthMaxServiceBytes is refused,
//     INVALID_ARGUMENT, before health.Server sees it, so no Watch keeps a large name;
//   - Health.Watch streams opened without a valid token are at most --max-connections at once
//     (client-side health checking opens one per connection), RESOURCE_EXHAUSTED, TOO_MANY_STREAMS
//     past it.
const (
	// healthBodyTimeout is how long a health call may wait for its request after its headers: a
	// probe sends both at once, so 2 s is far beyond any real one (Kubernetes gives a probe 1 s in
	// all by default), and what a client that sends only headers can hold a place for.
	healthBodyTimeout = 2 * time.Second
	// healthMaxServiceBytes bounds the service name of a health request. Names are fully
	// qualified gRPC service names, a few dozen bytes; 1 KiB leaves room for any real one.
	healthMaxServiceBytes = 1 << 10
)

// flagMaxConnections names the flag that sets the cap on anonymous Health.Watch streams.
const flagMaxConnections = "--max-connections"

// errHealthBodyTimeout is the cause of a health call ended for a request that did not arrive in time.
var errHealthBodyTimeout = errors.New("the health request did not arrive within " + healthBodyTimeout.String() + " of its headers")

type healthCallKey struct{}

// healthCall is what the tap leaves in a health call's context for the health service.
type healthCall struct {
	anonymous bool         // no valid token: it counts against the anonymous Watch cap
	res       *reservation // its place, given back once the request is read; nil: none
	timer     *time.Timer  // ends the call at healthBodyTimeout unless the request is read first
}

// healthTap is the tap's handling of a grpc.health.v1 call (callTap.handle): told apart by a valid
// token, never refused for lack of one; a place reserved as described above; the body deadline
// armed. The call gets no principal even with a token: health is exempt from authentication, so
// its streams are not the revocation's to end (revoke.go registers streams by their principal).
func (c *callTap) healthTap(ctx context.Context, info *tap.Info) (context.Context, error) {
	hc := &healthCall{anonymous: true}
	if c.tokens != nil {
		if _, err := bearerDigest(info.Header, c.tokens); err == nil {
			hc.anonymous = false
		}
	}
	var err error
	switch {
	case c.tokens != nil && hc.anonymous:
		// Anyone may make this call: it must not touch the budget of those with a token. Every
		// method reserves, Watch too: its request is read like any other.
		hc.res, err = c.health.reserve()
	case !c.kind(info.FullMethodName).serverStream:
		hc.res, err = c.budget.reserve()
		if err != nil {
			// A health check the full budget refuses takes a place of its own: probes pass a flood.
			if r, _ := c.health.reserve(); r != nil {
				hc.res, err = r, nil
			}
		}
	}
	if err != nil {
		c.metrics.refusedBeforeRead("inflight_budget")
		return ctx, err
	}
	if hc.res != nil {
		ctx = withReservation(ctx, hc.res)
	}
	ctx = withStreamCancel(ctx)
	cancel, _ := streamCancelFrom(ctx)
	hc.timer = time.AfterFunc(healthBodyTimeout, func() { cancel(errHealthBodyTimeout) })
	context.AfterFunc(ctx, func() { hc.timer.Stop() }) // a call that ends without requestRead
	return context.WithValue(ctx, healthCallKey{}, hc), nil
}

// healthCallFrom is what the tap left for a health call, or nil (a server without the tap).
func healthCallFrom(ctx context.Context) *healthCall {
	hc, _ := ctx.Value(healthCallKey{}).(*healthCall)
	return hc
}

// requestRead is called by the health service once it holds a call's request: the body deadline
// is over, and the place that covered the reading is given back (what the call holds now is its
// request, which healthMaxServiceBytes bounds).
func requestRead(ctx context.Context) {
	hc := healthCallFrom(ctx)
	if hc == nil {
		return
	}
	hc.timer.Stop()
	if hc.res != nil {
		hc.res.release()
	}
}

// checkServiceName refuses a health request whose service name is longer than
// healthMaxServiceBytes.
func checkServiceName(service string) error {
	if len(service) <= healthMaxServiceBytes {
		return nil
	}
	st := status.Newf(codes.InvalidArgument, "service: %d bytes, longer than the %d a health request may name", len(service), healthMaxServiceBytes)
	return withErrorInfo(st, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, map[string]string{
		"field":           "service",
		"serviceBytes":    strconv.Itoa(len(service)),
		"maxServiceBytes": strconv.Itoa(healthMaxServiceBytes),
	}).Err()
}

// watchSlots caps the Health.Watch streams opened without a valid token.
type watchSlots struct {
	limit int64
	open  atomic.Int64
}

// take takes a slot, or refuses with RESOURCE_EXHAUSTED, TOO_MANY_STREAMS when none is free.
func (w *watchSlots) take() error {
	if n := w.open.Add(1); n > w.limit {
		w.open.Add(-1)
		st := status.Newf(codes.ResourceExhausted,
			"%d Health.Watch streams without a token are open, the limit is %d (set by %s); retry when a stream has ended",
			n-1, w.limit, flagMaxConnections)
		return withErrorInfo(st, historyv1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS, map[string]string{
			"openStreams": strconv.FormatInt(n-1, 10),
			"maxStreams":  strconv.FormatInt(w.limit, 10),
			"flag":        flagMaxConnections,
		}).Err()
	}
	return nil
}

// give gives a slot back.
func (w *watchSlots) give() { w.open.Add(-1) }
