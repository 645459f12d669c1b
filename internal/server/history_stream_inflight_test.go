package server

import (
	"io"
	"strings"
	"testing"

	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// newInflightHistoryFixture is a history fixture served behind the tap, with a receive limit of
// per bytes, an in-flight budget of budget bytes and an import limit of 4 MiB.
func newInflightHistoryFixture(t *testing.T, per int, budget int64) *historyFixture {
	t.Helper()
	l := DefaultLimits()
	l.MaxRecvMsgSize, l.MaxInflightBytes = per, budget
	return newLimitedHistoryFixture(t, l)
}

// newLimitedHistoryFixture is a history fixture served behind the tap with limits l and an import
// limit of 4 MiB.
func newLimitedHistoryFixture(t *testing.T, l Limits) *historyFixture {
	t.Helper()
	st := store.NewMemory()
	ts := newTestServer(t, func(gs *grpc.Server) {
		hs := NewHistoryServer(st, zap.NewNop())
		hs.setBounds(DefaultMaxResponseBytes, DefaultMaxRenderedBytes, 4<<20)
		historyv1.RegisterHistoryServiceServer(gs, hs)
	}, WithLimits(l))
	return &historyFixture{st: st, c: historyv1.NewHistoryServiceClient(ts.conn), ts: ts}
}

// TestImportBranchStreamHoldsItsBuffer: issue 11 review: an ImportBranchStream buffers up to
// --max-import-bytes but its tap reservation is one message (--max-recv-msg-size); the call's
// reservation grows with its buffer, and one whose buffer does not fit the in-flight budget is
// refused RESOURCE_EXHAUSTED INFLIGHT_BUDGET_EXCEEDED with figures, before the import limit, and
// gives everything back when it ends.
func TestImportBranchStreamHoldsItsBuffer(t *testing.T) {
	const per, budget = 64 << 10, 512 << 10
	f := newInflightHistoryFixture(t, per, budget)
	_, err := imp2(t, f, []byte(strings.Repeat("x", 2<<20))) // under the 4 MiB import limit, past the budget
	ei := wantStatusInfo(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_INFLIGHT_BUDGET_EXCEEDED)
	if md := ei.GetMetadata(); md["flag"] != "--max-inflight-bytes" || md["budgetBytes"] != "524288" || md["heldBytes"] == "" || md["requestBytes"] == "" {
		t.Errorf("metadata %v, want the figures and the flag", md)
	}
	eventually(t, "the import's reservation given back", func() bool { return f.ts.tap.budget.reserved() == 0 })

	// An import that fits still works, and gives back what it held.
	b := f.create(t, nil)
	f.instruction(t, b, strings.Repeat("y", 40<<10))
	exp, err := f.st.ExportBranch(testContext(t), mustUUID(t, b), store.ExportInput{Mode: envelope.ModeJSON})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := imp2(t, f, jsonv.Marshal(exp.Data)); err != nil {
		t.Fatalf("an import within the budget: %v", err)
	}
	eventually(t, "the import's reservation given back", func() bool { return f.ts.tap.budget.reserved() == 0 })
}

// TestExportBranchStreamReservesItsText: issue 11 review: an ExportBranchStream holds its whole
// export text while it sends it; the text counts against the in-flight budget, a stream whose text
// does not fit is refused with figures, and the reservation is given back when the stream ends.
func TestExportBranchStreamReservesItsText(t *testing.T) {
	const per, budget = 256 << 10, 1 << 20
	f := newInflightHistoryFixture(t, per, budget)
	ctx := testContext(t)
	export := func(b string) error {
		stream, err := f.c.ExportBranchStream(ctx, &historyv1.ExportBranchStreamRequest{BranchId: b})
		if err != nil {
			return err
		}
		for {
			if _, err := stream.Recv(); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
		}
	}
	small := f.create(t, nil)
	f.instruction(t, small, strings.Repeat("s", 200<<10))
	if err := export(small); err != nil {
		t.Fatalf("an export within the budget: %v", err)
	}
	eventually(t, "the export's reservation given back", func() bool { return f.ts.tap.budget.reserved() == 0 })

	big := f.create(t, nil)
	for range 6 { // 6 x 200 KiB: the text is past the 1 MiB budget
		f.instruction(t, big, strings.Repeat("b", 200<<10))
	}
	ei := wantStatusInfo(t, export(big), codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_INFLIGHT_BUDGET_EXCEEDED)
	if md := ei.GetMetadata(); md["flag"] != "--max-inflight-bytes" || md["budgetBytes"] != "1048576" || md["requestBytes"] == "" {
		t.Errorf("metadata %v, want the figures and the flag", md)
	}
	eventually(t, "nothing reserved after the refusal", func() bool { return f.ts.tap.budget.reserved() == 0 })
}
