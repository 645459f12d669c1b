package client_test

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/server"
)

// Messages follows next_page_token to the end (README "History API": paging; an empty token ends
// the list), from the request's own page_token, without changing the request.
func TestMessagesFollowsPages(t *testing.T) {
	c := dial(t, startServer(t))
	ctx := testContext(t)
	branch := newBranch(t, c)
	var want []string
	for i := range 7 {
		resp, err := c.History.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: branch, Input: instruction(fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, resp.GetMessage().GetId())
	}
	req := &historyv1.ListMessagesRequest{BranchId: branch, PageSize: 3}
	var got []string
	for m, err := range c.Messages(ctx, req) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, m.GetId())
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Messages = %v, want %v", got, want)
	}
	if req.GetPageToken() != "" {
		t.Error("Messages changed the caller's request")
	}
	for m, err := range c.Messages(ctx, &historyv1.ListMessagesRequest{BranchId: "0c0ffee0-0000-4000-8000-00000000dead"}) {
		if m != nil || client.Reason(err) != historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND {
			t.Errorf("Messages of an unknown branch yielded (%v, %v), want BRANCH_NOT_FOUND", m, err)
		}
	}
}

// Reason and ErrorInfo read the google.rpc.ErrorInfo every historyd error carries (
// docs/design.md#errors), also through %w wrapping.
func TestReasonAndErrorInfo(t *testing.T) {
	c := dial(t, startServer(t))
	branch := "0c0ffee0-0000-4000-8000-00000000beef"
	_, err := c.History.GetBranch(testContext(t), &historyv1.GetBranchRequest{BranchId: branch})
	wrapped := fmt.Errorf("loading: %w", err)
	if got := client.Reason(wrapped); got != historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND {
		t.Errorf("Reason = %v, want BRANCH_NOT_FOUND", got)
	}
	if info := client.ErrorInfo(wrapped); info.GetMetadata()["branchId"] != branch || info.GetDomain() != "historyd" {
		t.Errorf("ErrorInfo = %v, want domain historyd and branchId %s", info, branch)
	}
	if got := client.Reason(fmt.Errorf("plain")); got != historyv1.ErrorReason_ERROR_REASON_UNSPECIFIED {
		t.Errorf("Reason of a non-status error = %v, want UNSPECIFIED", got)
	}
}

// WithToken sends `authorization: Bearer <token>` (README "Configuration": auth tokens), which the
// server requires of every call once tokens are on.
func TestWithToken(t *testing.T) {
	const token = "s3cret-token-0123456789abcdef"
	tokens, err := server.NewTokens(token)
	if err != nil {
		t.Fatal(err)
	}
	addr := startServerWith(t, []server.Option{server.WithAuthTokens(tokens)})
	ctx := testContext(t)
	if _, err := dial(t, addr).History.ListBranches(ctx, &historyv1.ListBranchesRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a token: %v, want UNAUTHENTICATED", err)
	}
	if _, err := dial(t, addr, client.WithToken(token)).History.ListBranches(ctx, &historyv1.ListBranchesRequest{}); err != nil {
		t.Fatalf("with the token: %v", err)
	}
}

// Participant and Broadcast are the three states of a participant (docs/design.md#wire-model): a
// string is normalised, JSON null is a broadcast, and a nil Value is UNSET.
func TestParticipants(t *testing.T) {
	c := dial(t, startServer(t))
	ctx := testContext(t)
	a, b := "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
	for _, owner := range []string{a, b} {
		if _, err := c.Exchange.Register(ctx, &historyv1.RegisterRequest{OwnerId: owner}); err != nil {
			t.Fatal(err)
		}
	}
	content := `"hi"`
	for _, r := range []*historyv1.SendRequest{
		{Sender: a, Recipient: client.Participant(b), ContentJson: &content},
		{Sender: a, Recipient: client.Broadcast(), ContentJson: &content},
		{Sender: a, ContentJson: &content}, // UNSET: a dead letter at collect
	} {
		if _, err := c.Exchange.Send(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	resp, err := c.Exchange.Collect(ctx, &historyv1.CollectRequest{OwnerId: a, IncludeReachedOwnerIds: true})
	if err != nil {
		t.Fatal(err)
	}
	var reached, dropped []string
	for _, d := range resp.GetDeliveries() {
		reached = append(reached, fmt.Sprint(d.GetReachedOwnerIds()))
		for _, drop := range d.GetDrops() {
			dropped = append(dropped, drop.GetReason().String())
		}
	}
	if fmt.Sprint(reached) != fmt.Sprintf("[[%s] [%s] []]", b, b) || fmt.Sprint(dropped) != "[DEAD_LETTER_REASON_UNSET_RECIPIENT]" {
		t.Errorf("reached %v, dropped %v; want B, B (broadcast), then an unset-recipient drop", reached, dropped)
	}
}
