package client_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/server"
)

// issue 11: a branch whose export is larger than the response budget is read whole with
// ExportBranchAll and written back with ImportBranchReader; the unary ExportBranch is refused.
func TestExportImportBranchStreams(t *testing.T) {
	l := server.DefaultLimits()
	l.MaxResponseBytes, l.MaxRenderedBytes = 256<<10, 64<<10 // scaled down: a 600 KB branch crosses it
	c := dial(t, startServerWith(t, []server.Option{server.WithLimits(l)}))
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	b, err := c.History.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	id := b.GetBranch().GetId()
	for i := range 30 {
		if _, err := c.History.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: id, Input: &historyv1.AddMessageRequest_AssistantResponse{
			AssistantResponse: &historyv1.AssistantResponseInput{Response: &historyv1.AssistantResponseInput_Text{Text: strings.Repeat(string(rune('a'+i%26)), 20<<10)}},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.History.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: id}); client.Reason(err) != historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE {
		t.Fatalf("unary ExportBranch: %v, want RESPONSE_TOO_LARGE", err)
	}
	data, err := c.ExportBranchAll(ctx, &historyv1.ExportBranchStreamRequest{BranchId: id})
	if err != nil {
		t.Fatal(err)
	}
	if len(data) < 600<<10 || !bytes.Contains(data, []byte(strings.Repeat("z", 20<<10))) {
		t.Fatalf("export of %d bytes", len(data))
	}
	resp, err := c.ImportBranchReader(ctx, &historyv1.ImportBranchStreamRequest{NewBranchId: true}, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetBranch().GetId() == id || resp.GetBranch().GetMessageCount() != 30 {
		t.Fatalf("imported %v", resp.GetBranch())
	}
	again, err := c.ExportBranchAll(ctx, &historyv1.ExportBranchStreamRequest{BranchId: resp.GetBranch().GetId()})
	if err != nil || len(again) != len(data) {
		t.Fatalf("re-export: %d bytes (%v), want %d", len(again), err, len(data))
	}
	// An empty payload is one message with no data: INVALID_ARGUMENT, not a hang.
	if _, err := c.ImportBranchReader(ctx, nil, bytes.NewReader(nil)); client.Reason(err) != historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD {
		t.Errorf("empty import: %v", err)
	}
}
