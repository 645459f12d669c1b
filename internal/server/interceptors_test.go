package server

import (
	"context"
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// errorInfoOf returns the google.rpc.ErrorInfo detail of a status error, or nil.
func errorInfoOf(err error) *errdetails.ErrorInfo {
	for _, d := range status.Convert(err).Details() {
		if ei, ok := d.(*errdetails.ErrorInfo); ok {
			return ei
		}
	}
	return nil
}

// TestInterceptorChain drives the production chain (logging -> status mapping -> recovery) over a
// unary and a streaming call for each handler outcome, and checks what the client gets and the one
// log line per RPC (docs/development.md#style-errors and docs/development.md#style-lifecycle; docs/design.md#errors).
func TestInterceptorChain(t *testing.T) {
	tests := []struct {
		what      string
		code      codes.Code
		reason    historyv1.ErrorReason // UNSPECIFIED: no ErrorInfo expected
		msg       string                // the exact client-facing message, when not empty
		level     zapcore.Level         // of the "finished call" line
		wantCause bool                  // the real error is logged on the line
		panicLine bool                  // a separate panic line with the stack is logged
	}{
		{what: "ok", code: codes.OK, level: zapcore.InfoLevel},
		{what: "unknown", code: codes.Internal, reason: historyv1.ErrorReason_ERROR_REASON_INTERNAL,
			msg: internalMessage, level: zapcore.ErrorLevel, wantCause: true},
		{what: "field", code: codes.InvalidArgument, reason: historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD,
			msg: "message.sender: not null or a string", level: zapcore.InfoLevel},
		{what: "canceled", code: codes.Canceled, level: zapcore.InfoLevel},
		{what: "panic", code: codes.Internal, reason: historyv1.ErrorReason_ERROR_REASON_INTERNAL,
			msg: internalMessage, level: zapcore.ErrorLevel, panicLine: true},
	}
	calls := []struct {
		kind   string
		method string
		call   func(context.Context, *grpc.ClientConn, string) error
	}{
		{"unary", "Unary", callProbeUnary},
		{"stream", "Stream", callProbeStream},
	}
	for _, c := range calls {
		for _, tc := range tests {
			t.Run(c.kind+"/"+tc.what, func(t *testing.T) {
				ts := newTestServer(t, registerProbe)
				err := c.call(testContext(t), ts.conn, tc.what)

				st := status.Convert(err)
				if st.Code() != tc.code {
					t.Fatalf("code = %v (%v), want %v", st.Code(), err, tc.code)
				}
				if tc.msg != "" && st.Message() != tc.msg {
					t.Errorf("message = %q, want %q", st.Message(), tc.msg)
				}
				if strings.Contains(st.Message(), "secret") {
					t.Errorf("the client saw the real error: %q", st.Message())
				}
				ei := errorInfoOf(err)
				switch {
				case tc.reason == historyv1.ErrorReason_ERROR_REASON_UNSPECIFIED && ei != nil:
					t.Errorf("unexpected ErrorInfo %v", ei)
				case tc.reason != historyv1.ErrorReason_ERROR_REASON_UNSPECIFIED &&
					(ei == nil || ei.GetReason() != tc.reason.String() || ei.GetDomain() != errorDomain):
					t.Errorf("ErrorInfo = %v, want reason %v in domain %q", ei, tc.reason, errorDomain)
				}

				finished := ts.logs.FilterMessage("finished call").All()
				if len(finished) != 1 {
					t.Fatalf("%d 'finished call' lines, want exactly 1: %v", len(finished), finished)
				}
				line := finished[0]
				if line.Level != tc.level {
					t.Errorf("line level = %v, want %v", line.Level, tc.level)
				}
				fields := line.ContextMap()
				for key, want := range map[string]string{
					"grpc.service": probeService,
					"grpc.method":  c.method,
					"grpc.code":    tc.code.String(),
				} {
					if got := fields[key]; got != want {
						t.Errorf("line field %s = %v, want %q", key, got, want)
					}
				}
				if _, ok := fields["grpc.time_ms"]; !ok {
					t.Errorf("line has no duration field grpc.time_ms: %v", fields)
				}
				cause, hasCause := fields["grpc.error_cause"]
				if hasCause != tc.wantCause {
					t.Errorf("line grpc.error_cause = %v (present %v), want present %v", cause, hasCause, tc.wantCause)
				}
				if tc.wantCause && !strings.Contains(cause.(string), errProbeSecret.Error()) {
					t.Errorf("logged cause %q does not hold the real error", cause)
				}

				panics := ts.logs.FilterMessage("panic in RPC handler").All()
				if got := len(panics) == 1; got != tc.panicLine {
					t.Fatalf("%d panic lines, want one: %v", len(panics), tc.panicLine)
				}
				if tc.panicLine {
					pf := panics[0].ContextMap()
					if !strings.Contains(pf["stack"].(string), "probeBehave") {
						t.Errorf("panic line stack does not show the panicking function: %v", pf["stack"])
					}
					if pf["grpc.full_method"] != "/"+probeService+"/"+c.method {
						t.Errorf("panic line method = %v", pf["grpc.full_method"])
					}
				}
			})
		}
	}
}

// TestCodeToLevel: context endings are the client's doing and are logged at info, not as errors
// (docs/development.md#style-errors); server faults are errors.
func TestCodeToLevel(t *testing.T) {
	tests := []struct {
		code codes.Code
		want zapcore.Level
	}{
		{codes.OK, zapcore.InfoLevel},
		{codes.Canceled, zapcore.InfoLevel},
		{codes.DeadlineExceeded, zapcore.InfoLevel},
		{codes.NotFound, zapcore.InfoLevel},
		{codes.FailedPrecondition, zapcore.WarnLevel},
		{codes.ResourceExhausted, zapcore.WarnLevel},
		{codes.Internal, zapcore.ErrorLevel},
		{codes.Unknown, zapcore.ErrorLevel},
	}
	for _, tc := range tests {
		t.Run(tc.code.String(), func(t *testing.T) {
			if got := zapLevel(codeToLevel(tc.code)); got != tc.want {
				t.Errorf("level(%v) = %v, want %v", tc.code, got, tc.want)
			}
		})
	}
}
