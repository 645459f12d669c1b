package server

import (
	"errors"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
)

// The pieces of a long-lived server stream that are not specific to one service: a jittered
// heartbeat, a send bounded by a timeout, and the errors that end a stream (docs/development.md#style-streams:
// validate, subscribe, defer unsubscribe, then select over ctx.Done(), events and the heartbeat).
// SubscribeInbox and WatchBranch use them.

// Defaults of the stream options.
const (
	// DefaultHeartbeat is the default idle interval between heartbeat frames: well under the 60 s
	// idle timeouts common in load balancers and proxies, rare enough to cost nothing.
	DefaultHeartbeat = 15 * time.Second
	// DefaultSendTimeout is how long a stream may wait for the client to accept one frame (HTTP/2
	// flow control) before it is ended as too slow: a healthy client on a slow link accepts a frame
	// in well under a second, one that stopped reading never does.
	DefaultSendTimeout = 10 * time.Second
	// heartbeatJitter spreads heartbeats by ±10%, so streams opened together do not beat together.
	heartbeatJitter = 0.1
)

// StreamOption configures the long-lived streams of a service.
type StreamOption func(*streamConfig)

type streamConfig struct {
	heartbeat   time.Duration
	sendTimeout time.Duration
	// now is the service's clock (WithClock).
	now func() time.Time
	// leaseRecheck is how often a leasing SubscribeInbox held at its max_in_flight leases again
	// on its own (WithLeaseRecheck); 0: never. ExchangeService only.
	leaseRecheck time.Duration
}

func newStreamConfig(opts []StreamOption) streamConfig {
	c := streamConfig{heartbeat: DefaultHeartbeat, sendTimeout: DefaultSendTimeout, now: time.Now}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithHeartbeat sets the idle interval between heartbeat frames (jittered by ±10%). The default is
// DefaultHeartbeat; d <= 0 sends no heartbeats after the first frame.
func WithHeartbeat(d time.Duration) StreamOption { return func(c *streamConfig) { c.heartbeat = d } }

// WithSendTimeout sets how long a stream waits for the client to accept one frame before ending
// the stream with RESOURCE_EXHAUSTED (reason SUBSCRIBER_TOO_SLOW). The default is
// DefaultSendTimeout; d <= 0 means the default.
func WithSendTimeout(d time.Duration) StreamOption {
	return func(c *streamConfig) {
		if d > 0 {
			c.sendTimeout = d
		}
	}
}

// WithClock sets the clock the service reads: its heartbeats' times and, for ExchangeService,
// whether a lease is still ahead of its deadline (Receive's leased) and how long a leasing stream
// waits for the next message to become visible. Give it the Exchange's clock (exchange.WithClock,
// exchangetest's Options.Clock) when the engine was built with one, so that the server and the
// engine agree on which leases have expired; the default, time.Now, is the engines' default. nil
// keeps the default.
func WithClock(now func() time.Time) StreamOption {
	return func(c *streamConfig) {
		if now != nil {
			c.now = now
		}
	}
}

var (
	// errSlowConsumer ends a stream whose client fell behind: its subscription was evicted, or it
	// did not accept a frame within the send timeout (RESOURCE_EXHAUSTED, SUBSCRIBER_TOO_SLOW).
	errSlowConsumer = errors.New("stream ended: the client is not keeping up")
	// errShuttingDown ends a stream when the server starts shutting down (UNAVAILABLE,
	// SERVER_SHUTTING_DOWN), so that GracefulStop need not wait out the grace period for it.
	errShuttingDown = errors.New("server is shutting down")
	// errSendTimeout is the cause of a slow-consumer end when a frame was not accepted in time.
	errSendTimeout = errors.New("the client did not accept a frame within the send timeout")
	// errSendAborted is returned by streamSender.send when an abort channel closed while it waited.
	errSendAborted = errors.New("send aborted")
)

// slowConsumerError is errSlowConsumer with its cause and the stream's ErrorInfo metadata (the
// entity keys of docs/design.md#wire-model, for example ownerId or lastSequence).
type slowConsumerError struct {
	cause error
	md    map[string]string
}

func (e *slowConsumerError) Error() string { return errSlowConsumer.Error() + ": " + e.cause.Error() }

// Unwrap returns errSlowConsumer and the cause.
func (e *slowConsumerError) Unwrap() []error { return []error{errSlowConsumer, e.cause} }

// ErrorMetadata returns the stream's metadata for the ErrorInfo.
func (e *slowConsumerError) ErrorMetadata() map[string]string { return e.md }

// tooSlow returns the error that ends a stream whose client fell behind, with md in the ErrorInfo.
func tooSlow(cause error, md map[string]string) error {
	return &slowConsumerError{cause: cause, md: md}
}

// streamEndError ends a stream with err's code and reason (errorRules) and the stream's own
// ErrorInfo metadata, for example a watch stream's branchId and lastSequence.
type streamEndError struct {
	err error
	md  map[string]string
}

func (e *streamEndError) Error() string { return e.err.Error() }

// Unwrap returns the error whose rule gives the code and reason.
func (e *streamEndError) Unwrap() error { return e.err }

// ErrorMetadata returns the stream's metadata for the ErrorInfo.
func (e *streamEndError) ErrorMetadata() map[string]string { return e.md }

// heartbeat is a jittered, resettable timer: it fires after an idle interval of about d. A zero
// heartbeat never fires.
type heartbeat struct {
	d time.Duration
	t *time.Timer
}

func newHeartbeat(d time.Duration) *heartbeat {
	h := &heartbeat{d: d}
	if d > 0 {
		h.t = time.NewTimer(h.next())
	}
	return h
}

// next is d ± heartbeatJitter.
func (h *heartbeat) next() time.Duration {
	return time.Duration(float64(h.d) * (1 + heartbeatJitter*(2*rand.Float64()-1)))
}

// C fires when the stream has been idle for the interval; nil (never) when heartbeats are off.
func (h *heartbeat) C() <-chan time.Time {
	if h.t == nil {
		return nil
	}
	return h.t.C
}

// Reset starts a new idle interval; call it after every frame sent.
func (h *heartbeat) Reset() {
	if h.t != nil {
		h.t.Reset(h.next()) // since Go 1.23, Reset also drains a fired timer
	}
}

// Stop releases the timer.
func (h *heartbeat) Stop() {
	if h.t != nil {
		h.t.Stop()
	}
}

// streamSender sends one stream's frames from a goroutine of its own, so that a send blocked by a
// client that stopped reading (HTTP/2 flow control) can be given up on: SendMsg cannot be
// interrupted. One goroutine per stream, not per frame: a goroutine started for each frame would
// grow its stack anew on every send (a deep call through the codec), which cost WatchBranch about
// a sixth of its CPU in BenchmarkWatchDelivery.
//
// The handler owns it: newStreamSender starts the goroutine, close stops it and waits for it. After
// send has given up on a frame the goroutine stays blocked in SendMsg until the handler returns,
// which ends the stream and so unblocks SendMsg; the handler must then return at once, and close
// does not wait (the goroutine ends right after the handler).
type streamSender struct {
	ss       grpc.ServerStream
	timeout  time.Duration
	timer    *time.Timer
	frames   chan []any
	results  chan error
	progress chan struct{} // a frame of several handed over was accepted: the next has a timeout of its own
	quit     chan struct{}
	done     chan struct{}
	stuck    bool   // a send was given up on
	one      [1]any // send's frame, handed over as a slice without allocating one
}

func newStreamSender(ss grpc.ServerStream, timeout time.Duration) *streamSender {
	s := &streamSender{
		ss: ss, timeout: timeout, timer: time.NewTimer(timeout),
		frames: make(chan []any), results: make(chan error, 1), progress: make(chan struct{}, 1),
		quit: make(chan struct{}), done: make(chan struct{}),
	}
	s.timer.Stop()
	go s.loop()
	return s
}

func (s *streamSender) loop() {
	defer close(s.done)
	for {
		select {
		case msgs := <-s.frames:
			var err error
			for i, m := range msgs {
				if err = s.ss.SendMsg(m); err != nil {
					break
				}
				if i < len(msgs)-1 {
					select {
					case s.progress <- struct{}{}:
					default: // one pending is enough: it restarts the timeout
					}
				}
			}
			s.results <- err // results has room: send reads each result or gives up once
		case <-s.quit:
			return
		}
	}
}

// send sends msg, waiting at most the send timeout for the client to accept it. It returns
// errSendTimeout when the time runs out and errSendAborted when evicted or shutdown closes first
// (either may be nil), so that a stream blocked by a client that stopped reading still ends
// promptly; SendMsg's own error otherwise. After an error the handler must not send again.
func (s *streamSender) send(msg any, evicted, shutdown <-chan struct{}) error {
	s.one[0] = msg
	err := s.sendAll(s.one[:], evicted, shutdown)
	if !s.stuck { // else the goroutine may still hold it
		s.one[0] = nil
	}
	return err
}

// sendAll is send for several frames in order, handed to the goroutine at once: one handoff for
// frames that are ready together (the answers of an AppendMessages window). Each frame has the
// send timeout to be accepted in, as if sent alone; on an error the frames after the one that
// failed are not sent. msgs must not change until sendAll returns, nor after it gave up on a send
// (the goroutine may still be reading it).
func (s *streamSender) sendAll(msgs []any, evicted, shutdown <-chan struct{}) error {
	if s.stuck {
		return errSendAborted
	}
	select {
	case <-s.progress: // left from an earlier call whose last frames came fast
	default:
	}
	s.frames <- msgs // the goroutine is idle: it returned the previous result
	s.timer.Reset(s.timeout)
	defer s.timer.Stop() // since Go 1.23 a stopped timer delivers nothing stale
	for {
		select {
		case err := <-s.results:
			return err
		case <-s.progress:
			s.timer.Reset(s.timeout)
		case <-s.timer.C:
			s.stuck = true
			return errSendTimeout
		case <-evicted:
			return s.abort()
		case <-shutdown:
			return s.abort()
		}
	}
}

// abort gives up on the send in progress, unless it has finished as the abort came: select picks
// at random among ready cases, and a frame the client has received must count as sent, or the
// stream would end reporting a cursor behind it (a resume would then deliver that frame twice).
func (s *streamSender) abort() error {
	select {
	case err := <-s.results:
		return err
	default:
		s.stuck = true
		return errSendAborted
	}
}

// close stops the goroutine, and waits for it unless a send was given up on (see streamSender).
func (s *streamSender) close() {
	close(s.quit)
	if !s.stuck {
		<-s.done
	}
}
