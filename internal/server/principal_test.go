package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestPrincipalFromContext: the principal is stable per token, differs between tokens, never
// carries the token, and is "" without one (ADR-0010).
func TestPrincipalFromContext(t *testing.T) {
	in := func(v ...string) context.Context {
		return metadata.NewIncomingContext(context.Background(), metadata.Pairs(v...))
	}
	a1 := principalFromContext(in("authorization", "Bearer token-a"))
	a2 := principalFromContext(in("authorization", "bearer  token-a"))
	b := principalFromContext(in("authorization", "Bearer token-b"))
	if a1 == "" || a1 != a2 || a1 == b || strings.Contains(a1, "token") {
		t.Errorf("principals a=%q a'=%q b=%q: want stable, distinct, not the token", a1, a2, b)
	}
	if p := principalFromContext(context.Background()); p != "" {
		t.Errorf("no metadata: %q, want \"\"", p)
	}
	if p := principalFromContext(in("x", "y")); p != "" {
		t.Errorf("no token: %q, want \"\"", p)
	}
}

// TestHistoryRequestIDPerPrincipal: issue 11 ("The server-wide scope of CreateBranch, ImportBranch
// and ForkBranch becomes one scope per principal (per token ...), so another caller cannot flush
// yours") and ADR-0010: the same request id from two tokens creates two branches; a repeat with
// the same token returns the first response, before any other check.
func TestHistoryRequestIDPerPrincipal(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	src := f.create(t, nil)
	alice, bob := withToken(ctx, "alice-token"), withToken(ctx, "bob-token")

	a, err := f.c.CreateBranch(alice, &historyv1.CreateBranchRequest{RequestId: "same", Name: strPtr("a")})
	if err != nil {
		t.Fatal(err)
	}
	b, err := f.c.CreateBranch(bob, &historyv1.CreateBranchRequest{RequestId: "same", Name: strPtr("b")})
	if err != nil {
		t.Fatal(err)
	}
	if a.GetBranch().GetId() == b.GetBranch().GetId() {
		t.Fatal("bob's create with alice's request id replayed hers")
	}
	again, err := f.c.CreateBranch(alice, &historyv1.CreateBranchRequest{RequestId: "same", BranchId: "not a uuid"})
	if err != nil {
		t.Fatalf("alice's repeat: %v", err)
	}
	sameResponse(t, "CreateBranch", a, again)

	fa, err := f.c.ForkBranch(alice, &historyv1.ForkBranchRequest{RequestId: "fork", BranchId: src})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := f.c.ForkBranch(bob, &historyv1.ForkBranchRequest{RequestId: "fork", BranchId: src})
	if err != nil || fb.GetBranch().GetId() == fa.GetBranch().GetId() {
		t.Fatalf("bob's fork = %v, %v; want a branch of his own", fb, err)
	}
	ia, err := f.c.ImportBranch(alice, &historyv1.ImportBranchRequest{RequestId: "import", Data: "[]"})
	if err != nil {
		t.Fatal(err)
	}
	ib, err := f.c.ImportBranch(bob, &historyv1.ImportBranchRequest{RequestId: "import", Data: "[]"})
	if err != nil || ib.GetBranch().GetId() == ia.GetBranch().GetId() {
		t.Fatalf("bob's import = %v, %v; want a branch of his own", ib, err)
	}
	ia2, err := f.c.ImportBranch(alice, &historyv1.ImportBranchRequest{RequestId: "import", Data: "not JSON"})
	if err != nil {
		t.Fatalf("alice's import repeat: %v", err)
	}
	sameResponse(t, "ImportBranch", ia, ia2)
}
