package server

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// How long a call may hold its in-flight reservation while it waits on its client (the slowloris
// review). The tap reserves --max-recv-msg-size for every unary, client-streaming and bidirectional
// call when its headers arrive, before grpc-go reads a byte of its body (inflight_budget.go): it
// must, since grpc-go allocates a message's buffer as soon as its length prefix is read and gives
// no hook between that and the read, so a reservation taken once the message had arrived would
// leave the reads themselves unbounded (issue 11's flood of large requests). Nothing bounded how
// long the reservation was held, though: 64 calls that sent their headers and never a body held
// the whole default budget for as long as their client kept them open, and every other client's
// call was refused INFLIGHT_BUDGET_EXCEEDED. So the time a reservation may wait on its client is
// bounded instead, as nginx's client_body_timeout and Envoy's stream_idle_timeout bound it:
//
//   - the body: from the headers to the first request message read, --request-body-timeout;
//   - a stream's idle: each later wait of the handler in Recv, --stream-idle-timeout (a handler
//     busy with what it read is not waiting on its client, so the clock runs only inside Recv).
//     Not AppendMessages': a client's Appender keeps one stream for its life and sends items
//     when it has them, so an idle stream is its normal state, and a server that ended it after
//     the timeout would fail whichever item raced the end (StreamBrokenError, for the caller to
//     resend) in ordinary use. Its reservation is held while it is open, as before; a bound on
//     it needs a share per connection or token, not a clock.
//
// ExportBranchStream's sends, which hold its export's text, have no such clock: ending the stream
// of a client that does not read leaves the frame already queued in the transport, whose trailers
// queue behind it, so the memory stays while the reservation would be given back (the review of
// this change measured 27 MiB past a 4 MiB budget). It holds its reservation until the client
// reads or goes.
//
// Past either the call ends DEADLINE_EXCEEDED: a deadline, the server's, expired
// before the operation could complete. CANCELED says the caller gave up (gRPC's status codes), and
// a client that did not cancel should not be told it did. A health call keeps its own 2 s body
// deadline (health_limits.go).
const (
	// DefaultRequestBodyTimeout is the default of Limits.RequestBodyTimeout: clients send a
	// request with its headers, so the wait is the request's upload; 10 s carries a 4 MiB request
	// (the default --max-recv-msg-size) over a link of 3.5 Mbit/s, and most requests are a few KiB.
	DefaultRequestBodyTimeout = 10 * time.Second
	// DefaultStreamIdleTimeout is the default of Limits.StreamIdleTimeout: an import sends its
	// chunks one after the other as its source gives them, and 2 minutes takes a 1 MiB chunk (the
	// Go client's) from a source of 9 KB/s; an idle import holds its buffer, up to
	// --max-import-bytes, as well as its reservation.
	DefaultStreamIdleTimeout = 2 * time.Minute
)

// Flags named in the timeouts' messages.
const (
	flagRequestBodyTimeout = "--request-body-timeout"
	flagStreamIdleTimeout  = "--stream-idle-timeout"
)

// errRecvTimeout is the cause of a call ended because its client did not send in time.
var errRecvTimeout = errors.New("the client did not send its request message in time")

// recvWatch times one call's waits on its client. The tap arms it for the body; the outermost link
// of the chain disarms it once the first message is read (a unary call's request is read before the
// chain runs) and, for a stream, arms it again around each later Recv.
type recvWatch struct {
	body, idle time.Duration
	timer      *time.Timer             // stopped by the call's reservation when the call ends (stopOnRelease)
	cancel     context.CancelCauseFunc // the call's context, which the transport waits on
	idling     atomic.Bool             // the wait timed now is a later message's, not the body's
	// state arbitrates between the timer and a message read at the same moment: armed while a
	// wait is timed, then whichever of expire (fired) and the read (done) moves it first wins. A
	// message whose read lost is not handed to the handler: its client was told the call ended.
	// Fired is for good: Err reads DEADLINE_EXCEEDED from then on.
	state atomic.Int32
	// start and deadline (nanoseconds since start, monotonic) tell expire whether it is the
	// timer of the wait armed now: a timer that fired cannot be called back by Stop or Reset, so
	// the run it started may reach its compare-and-swap after a read won and the next wait was
	// armed, and must not end that wait (second review of this change).
	start    time.Time
	deadline atomic.Int64
	// end writes the call's status in the transport (revoke.go's streamEnder); set once the
	// stream's link of the chain runs. Without it the transport answers the cancellation with a
	// status of its own: DEADLINE_EXCEEDED too (recvContext), with grpc-go's message.
	end atomic.Pointer[func(*status.Status) error]
}

// withRecvWatch returns ctx ending DEADLINE_EXCEEDED when the body has not arrived within body, and
// the watch that times it (recvWatchFrom). A call's reservation stops the timer when the call
// ends, whatever the way (stopOnRelease): the tap gives every call that reserves a watch.
func withRecvWatch(ctx context.Context, body, idle time.Duration) context.Context {
	inner, cancel := context.WithCancelCause(ctx)
	w := &recvWatch{body: body, idle: idle, cancel: cancel, start: time.Now()}
	w.deadline.Store(int64(body))
	w.state.Store(watchArmed)
	w.timer = time.AfterFunc(body, w.expire)
	return &recvContext{Context: inner, w: w}
}

type recvWatchKey struct{}

// recvWatchFrom is the call's watch, or nil (a server-streaming call, a health call, no tap).
// recvContext answers it.
func recvWatchFrom(ctx context.Context) *recvWatch {
	w, _ := ctx.Value(recvWatchKey{}).(*recvWatch)
	return w
}

// The states of a recvWatch's timed wait.
const (
	watchDone  int32 = iota // no wait is timed: the last one's message was read
	watchArmed              // a wait is timed
	watchFired              // the timer ended the call
)

// expire ends the call, unless the message it waits for was read first: fired first, so that
// whatever the status write wakes reads DEADLINE_EXCEEDED, then the status, where the transport
// stream is known, then the context, which ends a Recv blocked in the transport. The reservation
// goes when grpc-go ends the stream.
func (w *recvWatch) expire() {
	if time.Since(w.start) < time.Duration(w.deadline.Load()) {
		return // an earlier wait's timer: the wait armed now has not run out
	}
	if !w.state.CompareAndSwap(watchArmed, watchFired) {
		return // the message was read just now
	}
	st := w.status()
	if end := w.end.Load(); end != nil {
		_ = (*end)(st) // fails only for a stream already over
	}
	w.cancel(fmt.Errorf("%w: %s", errRecvTimeout, st.Message()))
}

// read ends the timed wait because its message arrived; false when the timer ended the call
// first (the message is then dropped: the call is over for its client).
func (w *recvWatch) read() bool {
	w.timer.Stop()
	return w.state.CompareAndSwap(watchArmed, watchDone)
}

// arm times the next wait, for d.
func (w *recvWatch) arm(d time.Duration) bool {
	w.deadline.Store(int64(time.Since(w.start) + d)) // before the state: an expire that sees armed sees it
	if !w.state.CompareAndSwap(watchDone, watchArmed) {
		return false // fired already
	}
	w.timer.Reset(d)
	return true
}

// status is the DEADLINE_EXCEEDED the call ends with, naming the wait and its flag.
func (w *recvWatch) status() *status.Status {
	if w.idling.Load() {
		return status.Newf(codes.DeadlineExceeded,
			"the stream's next request message did not arrive within %v while the call held its in-flight reservation (%s); send it sooner, or open a new stream", w.idle, flagStreamIdleTimeout)
	}
	return status.Newf(codes.DeadlineExceeded,
		"the request message did not arrive within %v of the call's headers (%s); send the request with the call", w.body, flagRequestBodyTimeout)
}

// bodyRead stops the body's clock: the first message has been read. False when the timer ended the
// call first.
func (w *recvWatch) bodyRead() bool { return w.read() }

// recvContext is the call's context as the transport sees it: once the watch fired, Err is
// context.DeadlineExceeded, so that grpc-go, which turns its stream context's error into the
// call's status, answers DEADLINE_EXCEEDED where no status of ours was written first (a unary call,
// whose body is read before any of our code runs but the tap). It also carries the watch
// (recvWatchFrom), with no context of its own for it. Done, the other values and the cause are the
// inner context's: contexts derived from it attach to that one directly, with no goroutine.
type recvContext struct {
	context.Context
	w *recvWatch
}

// Err is context.DeadlineExceeded once the watch ended the call, else the inner context's.
func (c *recvContext) Err() error {
	err := c.Context.Err()
	if err != nil && c.w.state.Load() == watchFired {
		return context.DeadlineExceeded
	}
	return err
}

// Value is the watch for recvWatchKey, else the inner context's value.
func (c *recvContext) Value(key any) any {
	if key == (recvWatchKey{}) {
		return c.w
	}
	return c.Context.Value(key)
}

// timedStream is a stream with a watch as its handler sees it: the first Recv ends the body's
// clock, and every later one runs with the idle clock.
type timedStream struct {
	grpc.ServerStream
	w     *recvWatch
	first bool // the next Recv is the first
}

// RecvMsg receives m, timed. A message read as the timer fired is not returned: the call has ended
// for its client, so the handler gets the timeout instead (an import that went on to commit would
// write what its client was told failed).
func (s *timedStream) RecvMsg(m any) error {
	timed := s.first
	if !s.first && s.w.idle > 0 {
		s.w.idling.Store(true)
		timed = s.w.arm(s.w.idle)
	}
	err := s.ServerStream.RecvMsg(m)
	if s.first {
		s.first = false
		if !s.w.bodyRead() {
			return s.w.status().Err()
		}
	} else if timed && !s.w.read() {
		return s.w.status().Err()
	}
	return err
}

// timeStream returns ss timed by the call's watch, if it has one; the watch may now write the
// call's status itself.
func timeStream(ss grpc.ServerStream) grpc.ServerStream {
	w := recvWatchFrom(ss.Context())
	if w == nil {
		return ss
	}
	if e, ok := grpc.ServerTransportStreamFromContext(ss.Context()).(streamEnder); ok {
		end := e.WriteStatus
		w.end.Store(&end)
	}
	return &timedStream{ServerStream: ss, w: w, first: true}
}
