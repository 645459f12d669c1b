package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestLimitsValidate: every limit must be positive, except the connection age and its grace, for
// which zero means none (issue 7 "Limits, all flags with documented defaults").
func TestLimitsValidate(t *testing.T) {
	if err := DefaultLimits().Validate(); err != nil {
		t.Fatalf("DefaultLimits().Validate() = %v", err)
	}
	tests := []struct {
		name   string
		change func(*Limits)
		ok     bool
	}{
		{"age and grace set", func(l *Limits) { l.MaxConnectionAge, l.MaxConnectionAgeGrace = time.Hour, time.Minute }, true},
		{"permit without stream", func(l *Limits) { l.KeepalivePermitWithoutStream = true }, true},
		{"zero message size", func(l *Limits) { l.MaxRecvMsgSize = 0 }, false},
		{"negative message size", func(l *Limits) { l.MaxRecvMsgSize = -1 }, false},
		{"zero streams", func(l *Limits) { l.MaxConcurrentStreams = 0 }, false},
		{"zero ping interval", func(l *Limits) { l.KeepaliveMinTime = 0 }, false},
		{"zero keepalive time", func(l *Limits) { l.KeepaliveTime = 0 }, false},
		{"zero keepalive timeout", func(l *Limits) { l.KeepaliveTimeout = 0 }, false},
		{"zero idle", func(l *Limits) { l.MaxConnectionIdle = 0 }, false},
		{"negative age", func(l *Limits) { l.MaxConnectionAge = -time.Second }, false},
		{"negative grace", func(l *Limits) { l.MaxConnectionAgeGrace = -time.Second }, false},
		{"zero connections", func(l *Limits) { l.MaxConnections = 0 }, false},
		// issue 11: "Refuse at start if --max-inflight-bytes < --max-recv-msg-size".
		{"in-flight budget below one request", func(l *Limits) { l.MaxInflightBytes = int64(l.MaxRecvMsgSize) - 1 }, false},
		{"in-flight budget of one request", func(l *Limits) { l.MaxInflightBytes = int64(l.MaxRecvMsgSize) }, true},
		{"large requests need a larger budget", func(l *Limits) { l.MaxRecvMsgSize = 512 << 20 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := DefaultLimits()
			tc.change(&l)
			err := l.Validate()
			if tc.ok != (err == nil) {
				t.Fatalf("Validate() = %v, want ok %v", err, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrInvalidLimits) {
				t.Errorf("Validate() = %v, want it to wrap ErrInvalidLimits", err)
			}
			if got := l.orDefaults(); got.Validate() != nil {
				t.Errorf("orDefaults() = %+v does not validate", got)
			}
		})
	}
}

// TestMaxRecvMsgSize: a request over the limit is RESOURCE_EXHAUSTED, never a crash, and the
// server keeps serving the next call on the same connection (issue 7: "A request over a limit gets
// RESOURCE_EXHAUSTED or INVALID_ARGUMENT").
func TestMaxRecvMsgSize(t *testing.T) {
	l := DefaultLimits()
	l.MaxRecvMsgSize = 1024
	ts := newTestServer(t, registerProbe, WithLimits(l))
	big := strings.Repeat("x", 2048)
	for kind, call := range map[string]func() error{
		"unary":  func() error { return rawUnary(testContext(t), ts.conn, stringValue(big)) },
		"stream": func() error { return rawStream(testContext(t), ts.conn, stringValue(big)) },
	} {
		if err := call(); status.Code(err) != codes.ResourceExhausted {
			t.Errorf("%s over the limit = %v, want RESOURCE_EXHAUSTED", kind, err)
		}
	}
	if err := callProbeUnary(testContext(t), ts.conn, "ok"); err != nil {
		t.Errorf("call after the refused ones = %v, want OK", err)
	}
}

// TestRefusedBeforeChainLogged: a unary request over the size limit, which grpc-go refuses before
// any interceptor runs, still gets its one log line, marked grpc.before_chain (issue 7: "one line
// per RPC at its end"); a call the chain saw gets exactly one line, from the chain. The lines are
// read after a graceful shutdown, which returns only once every call's handling has finished.
func TestRefusedBeforeChainLogged(t *testing.T) {
	l := DefaultLimits()
	l.MaxRecvMsgSize = 1024
	ts := newTestServer(t, registerProbe, WithLimits(l))
	if err := rawUnary(testContext(t), ts.conn, stringValue(strings.Repeat("x", 2048))); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("oversized unary = %v, want RESOURCE_EXHAUSTED", err)
	}
	if err := callProbeUnary(testContext(t), ts.conn, "ok"); err != nil {
		t.Fatal(err)
	}
	if err := ts.Shutdown(testContext(t)); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"ResourceExhausted": true, "OK": false} // code: before_chain
	lines := ts.logs.FilterMessage("finished call").All()
	if len(lines) != len(want) {
		t.Fatalf("%d 'finished call' lines, want one a call: %v", len(lines), lines)
	}
	for _, e := range lines {
		f := e.ContextMap()
		code, _ := f["grpc.code"].(string)
		before, _ := f["grpc.before_chain"].(bool)
		if wantBefore, ok := want[code]; !ok || before != wantBefore || f["request_id"] == "" ||
			f["grpc.service"] != "historyd.test.Probe" || f["grpc.method"] != "Unary" {
			t.Errorf("line %v: want one line a call, grpc.before_chain only on the refused one, a request id, the service and method", f)
		}
		delete(want, code)
	}
}
