package server

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// DefaultMaxInflightBytes is the default of Limits.MaxInflightBytes: 256 MiB is 64 calls at the
// default --max-recv-msg-size of 4 MiB, more than two cores serve at once, and a bound a small
// container holds beside the memory budget (issue 11).
const DefaultMaxInflightBytes = 256 << 20

// healthInflightCalls is the number of places, of --max-recv-msg-size each, in the health calls' own
// pool. A health call with a valid token (or any, on a server without tokens) reserves from
// --max-inflight-bytes like any call and, when that is full, from this pool: a flood that fills the
// budget must not fail the probes (a failed liveness probe restarts the pod, and an in-memory
// server loses every history). A health call without a valid token on a server with tokens
// reserves from this pool only, so that those without a token cannot touch the budget of those
// with one, and gives its place back once its request is read (health_limits.go). Eight covers a
// kubelet, a load balancer and an operator's healthcheck at once.
const healthInflightCalls = 8

// flagMaxInflightBytes names the flag in the ErrorInfo of a refusal.
const flagMaxInflightBytes = "--max-inflight-bytes"

// flagMaxRecvMsgSize sizes the health calls' own places (healthInflightCalls of it), which
// --max-inflight-bytes does not: a refusal there names it.
const flagMaxRecvMsgSize = "--max-recv-msg-size"

// inflightBudget bounds the request bytes the server may be reading or holding at once. A call's
// size is not known before its body is read, so each call reserves the largest request it may send
// (--max-recv-msg-size) when its headers arrive, in the tap (tap.go), before grpc-go reads a byte
// of its body; a call that does not fit is refused at once, RESOURCE_EXHAUSTED, and costs its
// headers only. The reservation is released when the call's stream ends, whatever the way it ends
// (handler returned, client cancelled, deadline, connection lost): the tap ties the release to the
// stream's context, which grpc-go cancels on every one of those paths. How long a call may hold
// it while waiting on its client for its request, or an import for its next chunk, is bounded, so
// that calls that send headers alone cannot hold the budget for ever (recv_timeout.go).
//
// Unary calls reserve, and so do client-streaming and bidirectional ones (ImportBranchStream,
// reflection), which may hold a message of that size at any time while they last. A handler that
// holds more than that counts it too: ImportBranchStream grows its reservation with the payload it
// buffers (reservation.grow), and ExportBranchStream, which reserves nothing in the tap, reserves
// its export text while it sends it (reserveBytes, from the budget the tap puts in every call's
// context). Server-streaming
// calls (WatchBranch, SubscribeInbox, Health.Watch with a token) do not: they read one request when
// they open and then hold none for hours, and a reservation held from their headers to their first
// message made a thousand watchers opening at once refuse each other; their number is bounded by
// --watch-max-streams and the inbox stream limit instead (a Health.Watch without a token takes a
// place of the health pool until its request is read, and one of --max-connections slots after:
// health_limits.go).
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

// reservation is one call's share of a budget: per bytes when the call's headers arrive, grown
// while the call buffers more than that (grow). release gives it all back, once, however often
// called; a grow after the release takes nothing.
type reservation struct {
	b    *inflightBudget
	mu   sync.Mutex
	n    int64 // bytes held
	done bool  // released
	// timer, when set, is the call's wait on its client (recv_timeout.go), stopped at the release:
	// the call is over, whatever the way, and the release already runs then.
	timer *time.Timer
}

// stopOnRelease has the release stop t (at once, if the reservation is released already).
func (r *reservation) stopOnRelease(t *time.Timer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		t.Stop()
		return
	}
	r.timer = t
}

// release gives the reservation back; only the first call does anything.
func (r *reservation) release() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	r.done = true
	r.b.give(r.n)
	if r.timer != nil {
		r.timer.Stop()
	}
}

// grow takes delta more bytes for the call, or refuses with the budget's RESOURCE_EXHAUSTED status
// (held tells the refusal what the call holds already); a refusal takes nothing. ImportBranchStream
// grows its reservation as its payload arrives: a call holds what it buffers (issue 11 review).
func (r *reservation) grow(delta int64) error {
	if r == nil {
		return nil // a call without the tap holds no reservation
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || delta <= 0 {
		return nil // the call is over: its context ended, so its handler is on its way out
	}
	if err := r.b.take(delta, r.n); err != nil {
		return err
	}
	r.n += delta
	return nil
}

// shrink gives delta bytes of what grow took back, while the call goes on: an AppendMessages item
// answered no longer holds its request. Safe on a nil reservation (a call without the tap) and
// after the release, which gave everything back already.
func (r *reservation) shrink(delta int64) {
	if r == nil || delta <= 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return
	}
	delta = min(delta, r.n)
	r.n -= delta
	r.b.give(delta)
}

// held is the number of bytes the reservation holds.
func (r *reservation) held() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// reserve takes per bytes, or refuses with the RESOURCE_EXHAUSTED status (reason
// INFLIGHT_BUDGET_EXCEEDED, with figures) when they do not fit; a refusal takes nothing. It never
// blocks: the tap may not.
func (b *inflightBudget) reserve() (*reservation, error) { return b.reserveBytes(b.per) }

// reserveBytes takes n bytes as a reservation of their own (ExportBranchStream's text), or refuses
// as reserve does.
func (b *inflightBudget) reserveBytes(n int64) (*reservation, error) {
	if err := b.take(n, 0); err != nil {
		return nil, err
	}
	return &reservation{b: b, n: n}, nil
}

// take adds n bytes to the budget's use, or refuses when they do not fit; held is what the
// asking call holds already, for the refusal's figures.
func (b *inflightBudget) take(n, held int64) error {
	for {
		used := b.used.Load()
		if used+n > b.limit {
			return b.exceeded(used, n, held)
		}
		if b.used.CompareAndSwap(used, used+n) {
			if b.onChange != nil {
				b.onChange(n)
			}
			return nil
		}
	}
}

// give takes n bytes off the budget's use.
func (b *inflightBudget) give(n int64) {
	b.used.Add(-n)
	if b.onChange != nil {
		b.onChange(-n)
	}
}

// reserved is the number of bytes reserved now.
func (b *inflightBudget) reserved() int64 { return b.used.Load() }

// exceeded is the refusal of n more bytes when used bytes are reserved, held of them by the call
// that asks (0 for a call's first reservation, which is per bytes).
func (b *inflightBudget) exceeded(used, n, held int64) error {
	what := "for this call"
	if held > 0 {
		what = fmt.Sprintf("more for this call, which holds %d", held)
	}
	st := status.Newf(codes.ResourceExhausted,
		"in-flight request budget exceeded: %d bytes reserved by calls in progress + %d %s > %d (%s); retry later",
		used, n, what, b.limit, b.flag)
	md := map[string]string{
		"reservedBytes": strconv.FormatInt(used, 10),
		"requestBytes":  strconv.FormatInt(n, 10),
		"budgetBytes":   strconv.FormatInt(b.limit, 10),
		"flag":          b.flag,
	}
	if held > 0 {
		md["heldBytes"] = strconv.FormatInt(held, 10)
	}
	return withErrorInfo(st, historyv1.ErrorReason_ERROR_REASON_INFLIGHT_BUDGET_EXCEEDED, md).Err()
}

type (
	reservationKey struct{}
	budgetKey      struct{}
)

// withReservation returns ctx carrying r, released when ctx ends. grpc-go cancels a stream's
// context when the stream ends on any path, and at once if it is already over (a deadline that
// passed before the tap), so no reservation outlives its call.
func withReservation(ctx context.Context, r *reservation) context.Context {
	context.AfterFunc(ctx, r.release)
	return context.WithValue(ctx, reservationKey{}, r)
}

// reservationFrom is the call's reservation, or nil when it has none (a server-streaming call, a
// server without the tap, a handler called directly).
func reservationFrom(ctx context.Context) *reservation {
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	return r
}

// withBudget returns ctx carrying the in-flight budget, for a handler that reserves what it holds
// beyond its request (ExportBranchStream).
func withBudget(ctx context.Context, b *inflightBudget) context.Context {
	return context.WithValue(ctx, budgetKey{}, b)
}

// budgetFrom is the in-flight budget the tap put in ctx, or nil.
func budgetFrom(ctx context.Context) *inflightBudget {
	b, _ := ctx.Value(budgetKey{}).(*inflightBudget)
	return b
}
