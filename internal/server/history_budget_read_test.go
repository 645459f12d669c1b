package server

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// handCounter is a store that counts the messages it hands the server one at a time
// (ChatInput.Each, ExportInput.Each).
type handCounter struct {
	store.Store
	handed atomic.Int64
}

func (c *handCounter) count(each func(int, *envelope.Message) error) func(int, *envelope.Message) error {
	if each == nil {
		return nil
	}
	return func(i int, m *envelope.Message) error {
		c.handed.Add(1)
		return each(i, m)
	}
}

func (c *handCounter) ToChatMessages(ctx context.Context, b uuid.UUID, in store.ChatInput) (store.ChatResult, error) {
	in.Each = c.count(in.Each)
	return c.Store.ToChatMessages(ctx, b, in)
}

func (c *handCounter) ExportBranch(ctx context.Context, b uuid.UUID, in store.ExportInput) (store.Export, error) {
	in.Each = c.count(in.Each)
	return c.Store.ExportBranch(ctx, b, in)
}

// Review of the read paths, fault 1: ToChatMessages (both formats) and ExportBranch past the
// response budget are refused as before (RESOURCE_EXHAUSTED, RESPONSE_TOO_LARGE, the figures, the
// flag and the ids), but the store stops reading at the first message past the budget: the server
// is handed about the budget's worth of the branch, not all of it. responseBytes is what was
// counted when the budget was passed, at least the budget and at most it plus that message.
func TestHistoryRefusalReadsAboutTheBudget(t *testing.T) {
	const budget, msgBytes, count = 64 << 10, 10 << 10, 200
	st := &handCounter{Store: store.NewMemory()}
	ts := newTestServer(t, func(gs *grpc.Server) {
		hs := NewHistoryServer(st, zap.NewNop())
		hs.setBounds(budget, 48<<10, 1<<20)
		historyv1.RegisterHistoryServiceServer(gs, hs)
	})
	f := &historyFixture{c: historyv1.NewHistoryServiceClient(ts.conn), ts: ts}
	ctx := testContext(t)
	b := f.create(t, nil)
	var ids []string
	for i := range count {
		ids = append(ids, f.instruction(t, b, strconv.Itoa(i)+strings.Repeat("x", msgBytes)).GetId())
	}
	for _, tc := range []struct {
		name string
		call func() error
		keys []string
	}{
		{"ToChatMessages", func() error {
			_, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b})
			return err
		}, []string{"branchId", "messageId"}},
		{"ToChatMessages OpenAI", func() error {
			_, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Format: historyv1.ChatFormat_CHAT_FORMAT_OPENAI})
			return err
		}, []string{"branchId", "messageId"}},
		{"ExportBranch", func() error {
			_, err := f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: b})
			return err
		}, []string{"branchId"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st.handed.Store(0)
			ei, _ := wantStatus(t, tc.call(), codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE)
			md := ei.GetMetadata()
			if n, _ := strconv.Atoi(md["responseBytes"]); n <= budget || n > budget+2*msgBytes ||
				md["maxResponseBytes"] != strconv.Itoa(budget) || md["flag"] != "--max-response-bytes" || md["branchId"] != b {
				t.Errorf("metadata %v: want what was counted past the budget, the budget, the flag and the branch", md)
			}
			for _, k := range tc.keys {
				if md[k] == "" {
					t.Errorf("metadata %v has no %s", md, k)
				}
			}
			if n := st.handed.Load(); n > budget/msgBytes+1 {
				t.Errorf("the store handed over %d of the branch's %d messages for a %d KiB budget", n, count, budget>>10)
			}
		})
	}
	// What fits is answered as before.
	chat, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Order: &historyv1.MessageIds{Ids: ids[:3]}})
	if err != nil || len(chat.GetMessages()) != 3 || chat.GetMessageIds()[2] != ids[2] {
		t.Fatalf("a projection that fits: %v, %v", chat, err)
	}
}
