package server

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// DefaultMaxInflightBytes is the default of Limits.MaxInflightBytes: 256 MiB is 64 calls at the
// default --max-recv-msg-size of 4 MiB, more than two cores serve at once, and a bound a small
// container holds beside the memory budget (issue 11).
const DefaultMaxInflightBytes = 256 << 20

// healthInflightCalls is how many grpc.health.v1 calls may be in flight beyond the budget: a health
// check reserves from --max-inflight-bytes like any call, and when that is full, from a pool of its
// own of this many calls. A flood that fills the budget must not fail the probes (a failed liveness
// probe restarts the pod, and an in-memory server loses every history), and health checks, which
// need no token, can hold no more than the budget plus this pool. Eight covers a kubelet, a load
// balancer and an operator's healthcheck at once.
const healthInflightCalls = 8

// flagMaxInflightBytes names the flag in the ErrorInfo of a refusal.
const flagMaxInflightBytes = "--max-inflight-bytes"

// inflightBudget bounds the request bytes the server may be reading or holding at once. A call's
// size is not known before its body is read, so each call reserves the largest request it may send
// (--max-recv-msg-size) when its headers arrive, in the tap (tap.go), before grpc-go reads a byte
// of its body; a call that does not fit is refused at once, RESOURCE_EXHAUSTED, and costs its
// headers only. The reservation is released when the call's stream ends, whatever the way it ends
// (handler returned, client cancelled, deadline, connection lost): the tap ties the release to the
// stream's context, which grpc-go cancels on every one of those paths.
//
// Unary calls reserve, and so do client-streaming and bidirectional ones (ImportBranchStream,
// reflection), which may hold a message of that size at any time while they last. Server-streaming
// calls (WatchBranch, SubscribeInbox, Health.Watch) do not: they read one request when they open
// and then hold none for hours, and a reservation held from their headers to their first message
// made a thousand watchers opening at once refuse each other; their number is bounded by
// --watch-max-streams and the inbox stream limit instead.
type inflightBudget struct {
	limit, per int64
	flag       string // the flag that sets limit, for the refusal's ErrorInfo
	used       atomic.Int64
	onChange   func(delta int64) // nil, or the metrics gauge
}

// newInflightBudget returns a budget of limit bytes whose calls each reserve per bytes.
func newInflightBudget(limit, per int64, flag string, onChange func(int64)) *inflightBudget {
	return &inflightBudget{limit: limit, per: per, flag: flag, onChange: onChange}
}

// reservation is one call's share of a budget; release gives it back, once, however often called.
type reservation struct {
	b    *inflightBudget
	once sync.Once
}

// release gives the reservation back; only the first call does anything.
func (r *reservation) release() {
	r.once.Do(func() {
		r.b.used.Add(-r.b.per)
		if r.b.onChange != nil {
			r.b.onChange(-r.b.per)
		}
	})
}

// reserve takes per bytes, or refuses with the RESOURCE_EXHAUSTED status (reason
// INFLIGHT_BUDGET_EXCEEDED, with figures) when they do not fit; a refusal takes nothing. It never
// blocks: the tap may not.
func (b *inflightBudget) reserve() (*reservation, error) {
	for {
		used := b.used.Load()
		if used+b.per > b.limit {
			return nil, b.exceeded(used)
		}
		if b.used.CompareAndSwap(used, used+b.per) {
			if b.onChange != nil {
				b.onChange(b.per)
			}
			return &reservation{b: b}, nil
		}
	}
}

// reserved is the number of bytes reserved now.
func (b *inflightBudget) reserved() int64 { return b.used.Load() }

// exceeded is the refusal of a call when used bytes are reserved.
func (b *inflightBudget) exceeded(used int64) error {
	st := status.Newf(codes.ResourceExhausted,
		"in-flight request budget exceeded: %d bytes reserved by calls in progress + %d for this call > %d (%s); retry later",
		used, b.per, b.limit, b.flag)
	return withErrorInfo(st, historyv1.ErrorReason_ERROR_REASON_INFLIGHT_BUDGET_EXCEEDED, map[string]string{
		"reservedBytes": strconv.FormatInt(used, 10),
		"requestBytes":  strconv.FormatInt(b.per, 10),
		"budgetBytes":   strconv.FormatInt(b.limit, 10),
		"flag":          b.flag,
	}).Err()
}

type reservationKey struct{}

// withReservation returns ctx carrying r, released when ctx ends. grpc-go cancels a stream's
// context when the stream ends on any path, and at once if it is already over (a deadline that
// passed before the tap), so no reservation outlives its call.
func withReservation(ctx context.Context, r *reservation) context.Context {
	context.AfterFunc(ctx, r.release)
	return context.WithValue(ctx, reservationKey{}, r)
}
