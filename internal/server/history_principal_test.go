package server

import (
	"context"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// TestHistoryRequestIDPerPrincipal: issue 11 ("The server-wide scope of CreateBranch, ImportBranch
// and ForkBranch becomes one scope per principal (per token ...), so another caller cannot flush
// yours") and ADR-0010: the same request id from two tokens creates two branches; a repeat with
// the same token returns the first response, before any other check.
func TestHistoryRequestIDPerPrincipal(t *testing.T) {
	const aliceToken, bobToken = "alice-token-0123456789abcdef", "bob-token-0123456789abcdef0"
	st := store.NewMemory()
	ts := newTestServer(t, func(gs *grpc.Server) {
		historyv1.RegisterHistoryServiceServer(gs, NewHistoryServer(st, zap.NewNop()))
	}, WithAuthTokens(mustTokens(t, aliceToken, bobToken)))
	f := &historyFixture{st: st, c: historyv1.NewHistoryServiceClient(ts.conn), ts: ts}
	ctx := testContext(t)
	alice, bob := withToken(ctx, aliceToken), withToken(ctx, bobToken)
	src, err := f.c.CreateBranch(alice, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}

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

	fa, err := f.c.ForkBranch(alice, &historyv1.ForkBranchRequest{RequestId: "fork", BranchId: src.GetBranch().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	fb, err := f.c.ForkBranch(bob, &historyv1.ForkBranchRequest{RequestId: "fork", BranchId: src.GetBranch().GetId()})
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

	// ImportBranchStream shares ImportBranch's scope, per principal too (it recorded the id under
	// no caller, so bob's stream import with alice's id answered with her branch).
	streamImport := func(ctx context.Context, data string) (*historyv1.ImportBranchStreamResponse, error) {
		up, err := f.c.ImportBranchStream(ctx)
		if err != nil {
			return nil, err
		}
		if err := up.Send(&historyv1.ImportBranchStreamRequest{RequestId: "stream", Data: []byte(data)}); err != nil {
			return nil, err
		}
		return up.CloseAndRecv()
	}
	sa, err := streamImport(alice, "[]")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := streamImport(bob, "[]")
	if err != nil || sb.GetBranch().GetId() == sa.GetBranch().GetId() {
		t.Fatalf("bob's stream import = %v, %v; want a branch of his own", sb, err)
	}
	sa2, err := streamImport(alice, "not JSON")
	if err != nil {
		t.Fatalf("alice's stream import repeat: %v", err)
	}
	sameResponse(t, "ImportBranchStream", sa, sa2)
}
