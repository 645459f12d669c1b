package server

import (
	"context"
	"slices"
	"strings"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// testToken is a valid bearer token for the tests of this package.
const testToken = "test-token-0123456789abcdef"

// withToken returns ctx carrying `authorization: Bearer tok`.
func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

func mustTokens(t *testing.T, toks ...string) *Tokens {
	t.Helper()
	tokens, err := NewTokens(toks...)
	if err != nil {
		t.Fatalf("NewTokens: %v", err)
	}
	return tokens
}

// TestChainOrder: the links are request id -> logging -> auth -> recovery, outermost first, with
// metrics outside them all, the status mapping between logging and auth, and recovery innermost
// (docs/development.md#style-lifecycle; issue 7 "Interceptor chain ... tested for order"). The
// documented order (chainOrder) is what chainLinks builds; links that the configuration turns off
// are left out without reordering the rest.
func TestChainOrder(t *testing.T) {
	names := func(links []link) []string {
		var out []string
		for _, l := range links {
			out = append(out, l.name)
		}
		return out
	}
	tokens := mustTokens(t, testToken)
	streams, unwatch := newOpenStreams(tokens, nil)
	defer unwatch()
	all := options{tokens: tokens, metrics: NewMetrics(), inflight: newInflight(), streams: streams}
	if got := names(chainLinks(zap.NewNop(), all)); !slices.Equal(got, chainOrder) {
		t.Errorf("chain with every option = %v, want %v", got, chainOrder)
	}
	bare := names(chainLinks(zap.NewNop(), defaultOptions()))
	want := []string{"request id", "logging", "status", "malformed", "recovery"}
	if !slices.Equal(bare, want) {
		t.Errorf("chain with no options = %v, want %v", bare, want)
	}
	// The docs/development.md#style-lifecycle order, as a subsequence of the full chain.
	idx := func(name string) int { return slices.Index(chainOrder, name) }
	for _, pair := range [][2]string{{"request id", "logging"}, {"logging", "auth"}, {"auth", "recovery"}, {"logging", "status"}, {"status", "auth"}} {
		if idx(pair[0]) >= idx(pair[1]) {
			t.Errorf("%s is not outside %s in %v", pair[0], pair[1], chainOrder)
		}
	}
	if chainOrder[len(chainOrder)-1] != "recovery" {
		t.Errorf("recovery is not innermost: %v", chainOrder)
	}
}

// TestChainOrderBehaviour shows the order by its effects, over a unary and a streaming call of the
// probe service with authentication and metrics on (issue 7; docs/development.md#style-lifecycle):
//   - request id outside logging: the log line carries the request id the client sent;
//   - a call without a valid token is refused by the tap (tap.go; issue 11 "auth before bytes")
//     before the chain: it gets UNAUTHENTICATED with its reason, the panicking handler never runs,
//     and no link logs it (it is counted in historyd_calls_refused_before_read_total, not logged
//     one line a call, so that a flood does not become log volume);
//   - recovery innermost: with a token the panic is a fixed INTERNAL, its stack logged with the
//     request id, and the logging line shows INTERNAL.
func TestChainOrderBehaviour(t *testing.T) {
	calls := []struct {
		kind   string
		method string
		call   func(context.Context, *grpc.ClientConn, string) error
	}{
		{"unary", "Unary", callProbeUnary},
		{"stream", "Stream", callProbeStream},
	}
	tests := []struct {
		name      string
		token     string
		code      codes.Code
		panicLine bool
	}{
		{name: "no token", code: codes.Unauthenticated},
		{name: "wrong token", token: "wrong-token-0123456789abcdef", code: codes.Unauthenticated},
		{name: "token", token: testToken, code: codes.Internal, panicLine: true},
	}
	for _, c := range calls {
		for _, tc := range tests {
			t.Run(c.kind+"/"+tc.name, func(t *testing.T) {
				ts := newTestServer(t, registerProbe, WithAuthTokens(mustTokens(t, testToken)), WithMetrics(NewMetrics()))
				ctx := metadata.AppendToOutgoingContext(testContext(t), RequestIDHeader, "req-"+tc.name[:2])
				if tc.token != "" {
					ctx = withToken(ctx, tc.token)
				}
				err := c.call(ctx, ts.conn, "panic")
				if got := status.Code(err); got != tc.code {
					t.Fatalf("code = %v (%v), want %v", got, err, tc.code)
				}
				if tc.code == codes.Unauthenticated {
					if ei := errorInfoOf(err); ei.GetReason() != historyv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED.String() {
						t.Errorf("ErrorInfo = %v, want reason UNAUTHENTICATED", ei)
					}
				}
				finished := ts.logs.FilterMessage("finished call").All()
				if tc.code == codes.Unauthenticated {
					if len(finished) != 0 || len(ts.logs.FilterMessage("panic in RPC handler").All()) != 0 {
						t.Fatalf("a call refused by the tap reached the chain: %d finished-call lines", len(finished))
					}
					return
				}
				if len(finished) != 1 {
					t.Fatalf("%d finished-call lines, want 1", len(finished))
				}
				f := finished[0].ContextMap()
				if f["grpc.code"] != tc.code.String() || f["request_id"] != "req-"+tc.name[:2] || f["grpc.method"] != c.method {
					t.Errorf("log line = %v, want code %v, request_id req-%s, method %s", f, tc.code, tc.name[:2], c.method)
				}
				panics := ts.logs.FilterMessage("panic in RPC handler").All()
				if (len(panics) == 1) != tc.panicLine {
					t.Fatalf("%d panic lines, want panic line %v (the handler ran without a valid token?)", len(panics), tc.panicLine)
				}
				if tc.panicLine {
					pf := panics[0].ContextMap()
					if pf["request_id"] != "req-"+tc.name[:2] || !strings.Contains(pf["stack"].(string), "probeBehave") {
						t.Errorf("panic line = %v, want the request id and the stack", pf)
					}
				}
			})
		}
	}
}
