package main

import (
	"context"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestSlowlorisReleasedByTheBinary: the slowloris review, against the real binary: one connection
// opens enough calls that send their headers and never a body (GetBranch opened as a stream, an
// ImportBranchStream) to fill --max-inflight-bytes; before, they held it for as long as they
// stayed open and every other client's call was refused INFLIGHT_BUDGET_EXCEEDED. With a short
// --request-body-timeout each ends DEADLINE_EXCEEDED well before the client's own deadline, and
// another client's calls go through.
func TestSlowlorisReleasedByTheBinary(t *testing.T) {
	p := startProcess(t, []string{"--listen", "127.0.0.1:0", "--store", "memory",
		"--max-recv-msg-size", "65536", "--max-inflight-bytes", "256KiB", "--request-body-timeout", "200ms"}, "serving")
	addr := p.awaitAddress(t, "serving")
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()

	attacker, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	var idle []grpc.ClientStream
	for i := range 4 { // 4 x 64 KiB: the whole budget
		var cs grpc.ClientStream
		if i%2 == 0 {
			cs, err = attacker.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, historyv1.HistoryService_GetBranch_FullMethodName)
		} else {
			cs, err = historyv1.NewHistoryServiceClient(attacker).ImportBranchStream(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, cs)
	}
	for i, cs := range idle {
		err := cs.RecvMsg(new(historyv1.GetBranchResponse))
		if st := status.Convert(err); st.Code() != codes.DeadlineExceeded || ctx.Err() != nil {
			t.Fatalf("idle call %d: %v (client deadline over: %v), want DEADLINE_EXCEEDED from the server", i, err, ctx.Err())
		}
		if i%2 == 1 && !strings.Contains(status.Convert(err).Message(), "--request-body-timeout") {
			t.Errorf("idle import %d: %q does not name --request-body-timeout", i, status.Convert(err).Message())
		}
	}

	victim, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer victim.Close()
	h := historyv1.NewHistoryServiceClient(victim)
	b, err := h.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatalf("a victim's CreateBranch after the idle calls ended: %v", err)
	}
	if _, err := h.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: b.GetBranch().GetId()}); err != nil {
		t.Fatalf("a victim's GetBranch: %v", err)
	}
	if code := p.stop(t, syscall.SIGTERM); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0: %s", code, p.stderr.String())
	}
}
