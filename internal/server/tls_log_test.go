package server

import (
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestHandshakeFailuresRateLimited: a failed TLS handshake is logged at warn, at most once a
// second, and the next line counts the ones not logged (issue 19: "handshake failures at warn,
// rate-limited").
func TestHandshakeFailuresRateLimited(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	clock := time.Unix(1000, 0)
	l := &handshakeLimiter{logger: zap.New(core), now: func() time.Time { return clock }}
	peer := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 4242}
	errNoCert := errors.New("tls: client didn't provide a certificate")

	for range 5 {
		l.failed(peer, errNoCert)
	}
	clock = clock.Add(999 * time.Millisecond)
	l.failed(peer, errNoCert)
	if n := logs.Len(); n != 1 {
		t.Fatalf("%d lines after 6 failures within a second, want 1", n)
	}
	clock = clock.Add(time.Millisecond)
	l.failed(peer, errNoCert)
	all := logs.All()
	if len(all) != 2 {
		t.Fatalf("%d lines, want 2", len(all))
	}
	for i, want := range []int64{0, 5} {
		e := all[i]
		if e.Level != zapcore.WarnLevel || e.Message != "TLS handshake failed" {
			t.Errorf("line %d = %v %q, want warn TLS handshake failed", i, e.Level, e.Message)
		}
		f := e.ContextMap()
		if f["suppressed_since_last"] != want || f["peer.address"] != "127.0.0.1:4242" || f["error"] != errNoCert.Error() {
			t.Errorf("line %d fields %v, want suppressed_since_last %d, the peer and the error", i, f, want)
		}
	}
}
