package server

import (
	"testing"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestNULInStoredTextsIsInvalidArgument pins docs/decisions/0012 row 24 at the wire: a text
// historyd keeps in a column of its own (request ids, a branch's name and user, an Exchange
// message's recipient and channel) holding U+0000 is INVALID_ARGUMENT (INVALID_FIELD) naming the
// field, on every engine; on PostgreSQL these were INTERNAL, or (a Send's recipient) OK followed by
// a sender whose every collect failed.
func TestNULInStoredTextsIsInvalidArgument(t *testing.T) {
	h := newHistoryFixture(t)
	x := newExchangeFixture(t, nil)
	x.register(t, ownerA, ownerB)
	br := h.create(t, nil)
	nul := "a\x00b"
	ctx := testContext(t)
	for _, tc := range []struct {
		name, field string
		call        func() error
	}{
		{"CreateBranch name", "name", func() error {
			_, err := h.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{Name: &nul})
			return err
		}},
		{"CreateBranch user", "user", func() error {
			_, err := h.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{User: &nul})
			return err
		}},
		{"CreateBranch request_id", "request_id", func() error {
			_, err := h.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{RequestId: nul})
			return err
		}},
		{"AddMessage request_id", "request_id", func() error {
			req := instructionReq(br, "x")
			req.RequestId = nul
			_, err := h.c.AddMessage(ctx, req)
			return err
		}},
		{"ForkBranch name", "name", func() error {
			_, err := h.c.ForkBranch(ctx, &historyv1.ForkBranchRequest{BranchId: br, Name: &nul})
			return err
		}},
		{"ImportBranch data.name", "data.name", func() error {
			_, err := h.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{NewBranchId: true, Data: `{"name": "n\u0000", "messages": []}`})
			return err
		}},
		{"ImportBranch data.user", "data.user", func() error {
			_, err := h.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{NewBranchId: true, Data: `{"user": "u\u0000", "messages": []}`})
			return err
		}},
		{"DeleteBranch request_id", "request_id", func() error {
			_, err := h.c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: br, RequestId: nul})
			return err
		}},
		{"Send request_id", "request_id", func() error {
			_, err := x.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: sval(ownerB), RequestId: nul})
			return err
		}},
		{"Send channel", "channel", func() error {
			_, err := x.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: sval(ownerB), Channel: &nul})
			return err
		}},
		{"Send recipient", "recipient", func() error {
			_, err := x.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: sval(nul)})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { wantField(t, tc.call(), tc.field) })
	}
	if _, err := h.c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: br}); err != nil {
		t.Errorf("the branch is gone after the refused DeleteBranch: %v", err)
	}
	if got := x.collect(t, ownerA).GetCollectedCount(); got != 0 {
		t.Errorf("the refused sends queued %d messages", got)
	}
}
