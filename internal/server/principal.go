package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"google.golang.org/grpc/metadata"
)

// principalFromContext names the caller of ctx for the idempotency scope of CreateBranch,
// ImportBranch and ForkBranch (ADR-0010: one scope per principal): a stable digest of its bearer
// token, never the token itself, or "" when the call carries none (a server without auth has one
// scope). Auth, when on, has already refused a call whose token is not valid.
//
// Minimal version for issue 11's idempotency work; the auth work (h11-auth) provides the same
// function in auth.go, which returns "" whenever auth is off: keep that one at the merge.
func principalFromContext(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return ""
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return ""
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	return hex.EncodeToString(sum[:16])
}
