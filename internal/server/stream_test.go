package server

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestHeartbeatJitter: the idle interval is the configured one ±10%, never less or more.
func TestHeartbeatJitter(t *testing.T) {
	h := newHeartbeat(time.Second)
	defer h.Stop()
	lo, hi := 900*time.Millisecond, 1100*time.Millisecond
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := h.next()
		if d < lo || d > hi {
			t.Fatalf("interval %v outside [%v, %v]", d, lo, hi)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Errorf("only %d distinct intervals in 1000: no jitter", len(seen))
	}
}

// TestHeartbeatOff: a zero interval never fires and Reset and Stop are harmless.
func TestHeartbeatOff(t *testing.T) {
	h := newHeartbeat(0)
	if h.C() != nil {
		t.Error("a disabled heartbeat has a channel")
	}
	h.Reset()
	h.Stop()
}

// TestStreamOptions: defaults, and a non-positive send timeout keeps the default.
func TestStreamOptions(t *testing.T) {
	c := newStreamConfig(nil)
	if c.heartbeat != DefaultHeartbeat || c.sendTimeout != DefaultSendTimeout {
		t.Errorf("defaults %+v", c)
	}
	c = newStreamConfig([]StreamOption{WithHeartbeat(time.Second), WithSendTimeout(0)})
	if c.heartbeat != time.Second || c.sendTimeout != DefaultSendTimeout {
		t.Errorf("configured %+v", c)
	}
}

// TestStreamEndStatuses: a slow consumer is RESOURCE_EXHAUSTED with SUBSCRIBER_TOO_SLOW and the
// stream's metadata, whatever the cause; shutdown is UNAVAILABLE with SERVER_SHUTTING_DOWN.
func TestStreamEndStatuses(t *testing.T) {
	md := map[string]string{"lastSequence": "7"}
	err := tooSlow(errSendTimeout, md)
	if !errors.Is(err, errSendTimeout) || !errors.Is(err, errSlowConsumer) {
		t.Errorf("%v does not wrap its cause and errSlowConsumer", err)
	}
	checkStatus(t, toStatus(err), codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW, md)
	checkStatus(t, toStatus(errShuttingDown), codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN, nil)
}

// gatedStream is a grpc.ServerStream whose SendMsg waits for a token on accept (or the test's
// end) and records what it sent.
type gatedStream struct {
	grpc.ServerStream
	accept chan struct{}
	done   <-chan struct{}
	mu     sync.Mutex
	sent   []any
}

func (g *gatedStream) SendMsg(m any) error {
	select {
	case <-g.accept:
	case <-g.done:
		return errors.New("test over")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.sent = append(g.sent, m)
	return nil
}

func (g *gatedStream) sentSoFar() []any {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.sent)
}

// TestStreamSenderSendAllTimeoutPerFrame: sendAll hands several frames over at once, and each has
// the send timeout to be accepted in, as if sent alone: a batch whose frames are each accepted
// within the timeout is sent whole however long it takes in all, in order.
func TestStreamSenderSendAllTimeoutPerFrame(t *testing.T) {
	done := make(chan struct{})
	defer close(done)
	g := &gatedStream{accept: make(chan struct{}), done: done}
	const timeout = time.Second
	s := newStreamSender(g, timeout)
	defer s.close()
	frames := []any{"a", "b", "c", "d"}
	go func() { // accepts a frame every 3/4 of the timeout: four take three timeouts in all
		for range frames {
			select {
			case <-time.After(timeout * 3 / 4):
				g.accept <- struct{}{}
			case <-done:
				return
			}
		}
	}()
	if err := s.sendAll(frames, nil, nil); err != nil {
		t.Fatalf("sendAll: %v, want every frame sent", err)
	}
	if got := g.sentSoFar(); !slices.Equal(got, frames) {
		t.Errorf("sent %v, want %v", got, frames)
	}
}

// TestStreamSenderSendAllStuck: a frame of a batch that is not accepted within the timeout ends
// the send too slow, and the frames after it are not sent.
func TestStreamSenderSendAllStuck(t *testing.T) {
	done := make(chan struct{})
	defer close(done) // unblocks the goroutine stuck in SendMsg, as the handler's return does
	g := &gatedStream{accept: make(chan struct{}, 1), done: done}
	g.accept <- struct{}{} // the first frame only
	s := newStreamSender(g, 100*time.Millisecond)
	defer s.close()
	if err := s.sendAll([]any{"a", "b", "c"}, nil, nil); !errors.Is(err, errSendTimeout) {
		t.Fatalf("sendAll: %v, want errSendTimeout", err)
	}
	if got := g.sentSoFar(); !slices.Equal(got, []any{"a"}) {
		t.Errorf("sent %v, want [a]", got)
	}
	if err := s.send("d", nil, nil); !errors.Is(err, errSendAborted) {
		t.Errorf("send after a stuck sendAll: %v, want errSendAborted", err)
	}
}
