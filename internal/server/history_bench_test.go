package server

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// BenchmarkHistoryAddMessage is AddMessage of a 1 KB instruction through gRPC over bufconn, with the
// production interceptor chain (issue 4 figures; compare BenchmarkAddMessage in internal/store).
func BenchmarkHistoryAddMessage(b *testing.B) {
	srv := New(nil)
	RegisterHistory(srv, store.NewMemory(store.WithMemoryBudget(0)))
	lis := bufconn.Listen(1 << 20)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = conn.Close()
		_ = srv.Shutdown(context.Background())
		<-served
	})
	c := historyv1.NewHistoryServiceClient(conn)
	ctx := b.Context()
	var branch string
	req := &historyv1.AddMessageRequest{Input: instructionInput(strings.Repeat("x", 1000))}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%50_000 == 0 { // a fresh branch now and then keeps the run's memory bounded
			b.StopTimer()
			if branch != "" {
				if _, err := c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: branch}); err != nil {
					b.Fatal(err)
				}
			}
			resp, err := c.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
			if err != nil {
				b.Fatal(err)
			}
			branch = resp.GetBranch().GetId()
			req.BranchId = branch
			b.StartTimer()
		}
		if _, err := c.AddMessage(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
