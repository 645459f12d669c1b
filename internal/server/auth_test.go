package server

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestParseTokens: one token per line, comments and blank lines ignored, surrounding space trimmed;
// a short or non-printable token and an empty file are errors that name the line, never the token
// (issue 7: "--auth-tokens-file, one token per line").
func TestParseTokens(t *testing.T) {
	tests := []struct {
		name    string
		file    string
		want    []string
		wantErr error
		mention string
	}{
		{
			name: "tokens comments and blanks",
			file: "# ops team\n" + testToken + "\n\n   # indented comment\n  second-token-0123456789  \r\n",
			want: []string{testToken, "second-token-0123456789"},
		},
		{name: "no trailing newline", file: testToken, want: []string{testToken}},
		{name: "empty", file: "", wantErr: ErrNoTokens},
		{name: "only comments", file: "# nothing\n\n", wantErr: ErrNoTokens},
		{name: "short", file: testToken + "\nshort-secret\n", wantErr: ErrBadToken, mention: "line 2"},
		{name: "inner space", file: "abcdefgh ijklmnopq\n", wantErr: ErrBadToken, mention: "line 1"},
		{name: "non-ascii", file: "tökentokentokentoken\n", wantErr: ErrBadToken, mention: "line 1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTokens(strings.NewReader(tc.file))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("ParseTokens = %v, %v; want %v", got, err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.mention) {
					t.Errorf("error %q does not mention %q", err, tc.mention)
				}
				if strings.Contains(err.Error(), "short-secret") || strings.Contains(err.Error(), "ijklmnopq") {
					t.Errorf("error %q shows the token", err)
				}
				return
			}
			if err != nil || strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("ParseTokens = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestTokensLoadKeepsOldOnError: a reload replaces the set only when the new file is valid; a
// missing, empty or invalid file keeps the old tokens (issue 7: "a bad reload keeps the old
// tokens").
func TestTokensLoadKeepsOldOnError(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "tokens")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(testToken + "\n")
	tokens, err := LoadTokensFile(path)
	if err != nil {
		t.Fatalf("LoadTokensFile: %v", err)
	}
	const next = "next-token-0123456789abcdef"
	for _, bad := range []string{"", "# all commented out\n", "short\n"} {
		write(bad)
		if err := tokens.Load(path); err == nil {
			t.Errorf("Load(%q) succeeded", bad)
		}
		if !tokens.valid(testToken) || tokens.Len() != 1 {
			t.Errorf("after a bad reload (%q) the old token is gone", bad)
		}
	}
	if err := tokens.Load(filepath.Join(dir, "missing")); err == nil {
		t.Error("Load of a missing file succeeded")
	}
	write(next + "\n")
	if err := tokens.Load(path); err != nil {
		t.Fatalf("Load: %v", err)
	}
	if tokens.valid(testToken) || !tokens.valid(next) {
		t.Error("after a good reload the set is not the new file's")
	}
}

// TestTokensValid: only an exact member is valid; prefixes, extensions and the empty string are
// not.
func TestTokensValid(t *testing.T) {
	tokens := mustTokens(t, testToken, "second-token-0123456789")
	for tok, want := range map[string]bool{
		testToken:                    true,
		"second-token-0123456789":    true,
		testToken[:len(testToken)-1]: false,
		testToken + "x":              false,
		"":                           false,
		strings.ToUpper(testToken):   false,
	} {
		if got := tokens.valid(tok); got != want {
			t.Errorf("valid(%q) = %v, want %v", tok, got, want)
		}
	}
}

// TestAuthInterceptor: with tokens set, every call but grpc.health.v1 needs `authorization: Bearer
// <token>`; reflection is protected too; anything else is UNAUTHENTICATED with reason
// UNAUTHENTICATED and a message that names no token (issue 7 "Auth").
func TestAuthInterceptor(t *testing.T) {
	tests := []struct {
		name string
		md   []string // outgoing metadata pairs
		code codes.Code
	}{
		{name: "bearer", md: []string{"authorization", "Bearer " + testToken}, code: codes.OK},
		{name: "scheme case", md: []string{"authorization", "bearer " + testToken}, code: codes.OK},
		{name: "missing", code: codes.Unauthenticated},
		{name: "wrong", md: []string{"authorization", "Bearer wrong-token-0123456789abcdef"}, code: codes.Unauthenticated},
		{name: "no scheme", md: []string{"authorization", testToken}, code: codes.Unauthenticated},
		{name: "basic", md: []string{"authorization", "Basic " + testToken}, code: codes.Unauthenticated},
		{name: "empty bearer", md: []string{"authorization", "Bearer "}, code: codes.Unauthenticated},
		{name: "two values", md: []string{"authorization", "Bearer " + testToken, "authorization", "Bearer " + testToken}, code: codes.Unauthenticated},
	}
	ts := newTestServer(t, registerProbe, WithAuthTokens(mustTokens(t, testToken)))
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx := metadata.AppendToOutgoingContext(testContext(t), tc.md...)
			for kind, call := range map[string]func(context.Context) error{
				"unary":  func(ctx context.Context) error { return callProbeUnary(ctx, ts.conn, "ok") },
				"stream": func(ctx context.Context) error { return callProbeStream(ctx, ts.conn, "ok") },
				"reflection": func(ctx context.Context) error {
					stream, err := reflectionpb.NewServerReflectionClient(ts.conn).ServerReflectionInfo(ctx)
					if err != nil {
						return err
					}
					// A refused stream may already be closed when Send runs: Send then returns
					// io.EOF and the status is read by Recv (grpc.ClientStream.SendMsg's contract).
					if err := stream.Send(&reflectionpb.ServerReflectionRequest{
						MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
					}); err != nil && !errors.Is(err, io.EOF) {
						return err
					}
					_, err = stream.Recv()
					return err
				},
			} {
				err := call(ctx)
				if got := status.Code(err); got != tc.code {
					t.Fatalf("%s: code = %v (%v), want %v", kind, got, err, tc.code)
				}
				if tc.code == codes.OK {
					continue
				}
				if ei := errorInfoOf(err); ei.GetReason() != historyv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED.String() || ei.GetDomain() != errorDomain {
					t.Errorf("%s: ErrorInfo = %v, want reason UNAUTHENTICATED", kind, ei)
				}
				if strings.Contains(status.Convert(err).Message(), testToken[:10]) {
					t.Errorf("%s: message %q shows a token", kind, status.Convert(err).Message())
				}
			}
			// Health needs no token, whatever is sent.
			resp, err := healthpb.NewHealthClient(ts.conn).Check(ctx, &healthpb.HealthCheckRequest{})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Health/Check = %v, %v; want SERVING without a token", resp, err)
			}
		})
	}
}

// TestAuthReloadTakesEffect: a token loaded while the server runs is accepted by the next call,
// and the token it replaced is refused (issue 7: "reloaded on SIGHUP without a restart").
func TestAuthReloadTakesEffect(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(path, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokens, err := LoadTokensFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, registerProbe, WithAuthTokens(tokens))
	if err := callProbeUnary(withToken(testContext(t), testToken), ts.conn, "ok"); err != nil {
		t.Fatalf("call with the first token: %v", err)
	}
	const next = "rotated-token-0123456789abcdef"
	if err := os.WriteFile(path, []byte(next+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := tokens.Load(path); err != nil {
		t.Fatal(err)
	}
	if err := callProbeUnary(withToken(testContext(t), next), ts.conn, "ok"); err != nil {
		t.Errorf("call with the rotated token: %v", err)
	}
	if err := callProbeUnary(withToken(testContext(t), testToken), ts.conn, "ok"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("call with the replaced token = %v, want UNAUTHENTICATED", err)
	}
}
