package server

import (
	"errors"
	"testing"
	"time"

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
