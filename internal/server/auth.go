package server

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// MinTokenLength is the shortest bearer token a tokens file may hold: 16 random characters of the
// token alphabet are ~95 bits, out of reach of guessing over the network; anything shorter is more
// likely a placeholder than a secret.
const MinTokenLength = 16

// maxTokensFileSize bounds a tokens file: a few thousand tokens fit in a megabyte, and a path that
// points at something large by mistake fails instead of being read into memory.
const maxTokensFileSize = 1 << 20

// healthService is exempt from authentication, so that load balancers, Kubernetes probes and
// `historyd healthcheck` need no secret; it reveals only whether the server is serving.
const healthService = "grpc.health.v1.Health"

var (
	// ErrNoTokens is returned for a tokens file that holds no token: with authentication on, it would
	// refuse every call.
	ErrNoTokens = errors.New("tokens file holds no token")
	// ErrBadToken is returned for a tokens file line that is not a valid bearer token.
	ErrBadToken = errors.New("invalid token")
)

// Tokens is the set of bearer tokens the auth interceptor accepts. It is safe for concurrent use;
// Load replaces the whole set at once, so a call sees either the old set or the new one.
type Tokens struct {
	set atomic.Pointer[[][sha256.Size]byte]

	hooks reloadHooks // run after each replacement (revoke.go)
}

// onReplace adds f to what runs, synchronously and in no set order, after each replacement of the
// set (a successful Load); remove takes it off. f must not block: Load's caller waits for it.
func (t *Tokens) onReplace(f func()) (remove func()) {
	return t.hooks.add(f)
}

// NewTokens returns a set holding tokens; it fails like ParseTokens for an invalid or empty list.
func NewTokens(tokens ...string) (*Tokens, error) {
	t := &Tokens{}
	if err := t.replace(tokens); err != nil {
		return nil, err
	}
	return t, nil
}

// LoadTokensFile reads the tokens file at path into a new set (see ParseTokens for its format).
func LoadTokensFile(path string) (*Tokens, error) {
	t := &Tokens{}
	if err := t.Load(path); err != nil {
		return nil, err
	}
	return t, nil
}

// Load reads the tokens file at path and, only if it is valid and not empty, replaces the set with
// its tokens; on error the set is unchanged, so a bad edit to the file never locks clients out or
// lets everyone in.
func (t *Tokens) Load(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTokensFileSize+1))
	if err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > maxTokensFileSize {
		return fmt.Errorf("%s: larger than %d bytes", path, maxTokensFileSize)
	}
	tokens, err := ParseTokens(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return t.replace(tokens)
}

// Len returns the number of tokens in the set; a nil set has none.
func (t *Tokens) Len() int {
	if t == nil {
		return 0
	}
	if s := t.set.Load(); s != nil {
		return len(*s)
	}
	return 0
}

func (t *Tokens) replace(tokens []string) error {
	if len(tokens) == 0 {
		return ErrNoTokens
	}
	set := make([][sha256.Size]byte, 0, len(tokens))
	for i, tok := range tokens {
		if err := checkToken(tok); err != nil {
			return fmt.Errorf("token %d: %w", i+1, err)
		}
		set = append(set, sha256.Sum256([]byte(tok)))
	}
	t.set.Store(&set)
	t.hooks.run()
	return nil
}

// ParseTokens reads a tokens file: one token per line; blank lines and lines whose first non-blank
// character is '#' are ignored, and surrounding spaces are trimmed. A token is at least
// MinTokenLength characters of printable ASCII without spaces (RFC 6750's token68 alphabet is a
// subset). An invalid line is an error naming its line number, never the token.
func ParseTokens(r io.Reader) ([]string, error) {
	var tokens []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxTokensFileSize)
	for line := 1; sc.Scan(); line++ {
		tok := strings.TrimSpace(sc.Text())
		if tok == "" || strings.HasPrefix(tok, "#") {
			continue
		}
		if err := checkToken(tok); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		tokens = append(tokens, tok)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(tokens) == 0 {
		return nil, ErrNoTokens
	}
	return tokens, nil
}

func checkToken(tok string) error {
	if len(tok) < MinTokenLength {
		return fmt.Errorf("%w: shorter than %d characters", ErrBadToken, MinTokenLength)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: character %d is not printable ASCII (or is a space)", ErrBadToken, i+1)
		}
	}
	return nil
}

// valid reports whether tok is in the set. It compares SHA-256 digests in constant time and always
// compares against every token, so neither the time taken nor an early exit tells a caller how
// close a guess was or which token matched.
func (t *Tokens) valid(tok string) bool {
	return t.validDigest(sha256.Sum256([]byte(tok)))
}

// validDigest is valid for a token's SHA-256 digest: a stream keeps the digest of the token it was
// opened with, so that a reload can tell whether that token is still in the set (revoke.go).
func (t *Tokens) validDigest(sum [sha256.Size]byte) bool {
	s := t.set.Load()
	if s == nil {
		return false
	}
	match := 0
	for i := range *s {
		match |= subtle.ConstantTimeCompare(sum[:], (*s)[i][:])
	}
	return match == 1
}

// Reasons for refusing a call, in the status message; neither names a token.
const (
	msgMissingToken = "missing bearer token: send the metadata `authorization: Bearer <token>`"
	msgInvalidToken = "invalid bearer token"
)

// authenticate checks the call's `authorization: Bearer <token>` metadata against tokens. Every
// method but those of grpc.health.v1.Health needs it, server reflection included (it describes the
// whole API). It returns nil or an UNAUTHENTICATED status with reason UNAUTHENTICATED.
func authenticate(ctx context.Context, fullMethod string, tokens *Tokens) error {
	if authExempt(fullMethod) {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	_, err := bearerDigest(md, tokens)
	return err
}

// authExempt reports whether fullMethod needs no token: those of grpc.health.v1.Health.
func authExempt(fullMethod string) bool {
	return strings.HasPrefix(fullMethod, "/"+healthService+"/")
}

// bearerDigest returns the SHA-256 digest of the call's bearer token when tokens holds it, and
// otherwise the UNAUTHENTICATED status. It only reads md and hashes, so the tap (tap.go) can call
// it without blocking.
func bearerDigest(md metadata.MD, tokens *Tokens) ([sha256.Size]byte, error) {
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return [sha256.Size]byte{}, unauthenticated(msgMissingToken)
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if len(vals) != 1 || !ok || !strings.EqualFold(scheme, "bearer") {
		return [sha256.Size]byte{}, unauthenticated(msgInvalidToken)
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	if !tokens.validDigest(sum) {
		return [sha256.Size]byte{}, unauthenticated(msgInvalidToken)
	}
	return sum, nil
}

type principalKey struct{}

// principal is what the context of an authenticated call holds: the digest of its token.
type principal struct{ digest [sha256.Size]byte }

// withPrincipal returns ctx carrying the caller identified by its token's digest.
func withPrincipal(ctx context.Context, digest [sha256.Size]byte) context.Context {
	return context.WithValue(ctx, principalKey{}, &principal{digest: digest})
}

// principalFromContext returns a stable identity of the caller of ctx: the first 16 hex digits of
// the SHA-256 of its bearer token (the same token always gives the same identity, and the identity
// does not reveal the token), or "" when authentication is off (or for an exempt health call). The
// tap (tap.go) puts it in the context before any interceptor runs, so every handler can read it.
func principalFromContext(ctx context.Context) string {
	p, ok := ctx.Value(principalKey{}).(*principal)
	if !ok {
		return ""
	}
	return hex.EncodeToString(p.digest[:8])
}

func unauthenticated(msg string) error {
	return withErrorInfo(status.New(codes.Unauthenticated, msg),
		historyv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED, nil).Err()
}

// unaryAuth returns the unary auth interceptor over tokens.
func unaryAuth(tokens *Tokens) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := authenticate(ctx, info.FullMethod, tokens); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// streamAuth returns the stream auth interceptor over tokens.
func streamAuth(tokens *Tokens) grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := authenticate(ss.Context(), info.FullMethod, tokens); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// WithAuthTokens turns bearer-token authentication on: every call but grpc.health.v1 must carry
// `authorization: Bearer <token>` with a token of tokens, else it is UNAUTHENTICATED (reason
// UNAUTHENTICATED). tokens may be reloaded while the server runs (Tokens.Load). The default, and a
// nil tokens, is no authentication.
func WithAuthTokens(tokens *Tokens) Option {
	return func(o *options) { o.tokens = tokens }
}
