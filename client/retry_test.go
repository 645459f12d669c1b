package client_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Issue 8: "retries that reuse the request_id"; docs/design.md#idempotency: a repeat returns the
// first response and writes nothing. The proxy cuts the connection after the server has applied
// AddMessage and before its response reaches the client.
func TestRetryAfterLostResponseAppliesOnce(t *testing.T) {
	addr := startServer(t)
	direct := dial(t, addr) // the test's own view of the server, not through the proxy
	p := newProxy(t, addr)
	rec := &recorder{}
	c := dial(t, p.Addr(), client.WithRetry(fastRetry), rec.option())
	branch := newBranch(t, direct)

	if _, err := c.History.GetBranch(testContext(t), &historyv1.GetBranchRequest{BranchId: branch}); err != nil {
		t.Fatal(err) // connects through the proxy, so the next response is AddMessage's
	}
	checked := false
	rec.reset(func(n int, err error) {
		if n == 1 {
			// Before the retry: the first attempt was applied although it failed.
			checked = true
			if got := head(t, direct, branch); got != 2 {
				t.Errorf("after the cut attempt (%v), head sequence = %d, want 2 (the write was applied)", err, got)
			}
		}
	})
	cut := p.CutBeforeResponse()
	req := &historyv1.AddMessageRequest{BranchId: branch, Input: instruction("applied once")}
	resp, err := c.History.AddMessage(testContext(t), req)
	if err != nil {
		t.Fatalf("AddMessage with retries: %v", err)
	}
	<-cut

	attempts := rec.Attempts()
	if len(attempts) != 2 || attempts[0].code != codes.Unavailable || attempts[1].code != codes.OK {
		t.Fatalf("attempts = %+v, want UNAVAILABLE then OK", attempts)
	}
	if attempts[0].requestID == "" || attempts[0].requestID != attempts[1].requestID {
		t.Errorf("request ids %q then %q: want one, made by the client, reused", attempts[0].requestID, attempts[1].requestID)
	}
	if req.GetRequestId() != "" {
		t.Errorf("the caller's request was modified: request_id %q", req.GetRequestId())
	}
	if got := head(t, direct, branch); got != 2 {
		t.Errorf("head sequence = %d, want 2: one write", got)
	}
	list, err := direct.History.ListMessages(testContext(t), &historyv1.ListMessagesRequest{BranchId: branch})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetMessages()) != 1 || list.GetMessages()[0].GetId() != resp.GetMessage().GetId() {
		t.Errorf("branch holds %d messages, want exactly the one AddMessage answered (%s)", len(list.GetMessages()), resp.GetMessage().GetId())
	}
	if !checked {
		t.Error("the state after the first attempt was not checked")
	}
	if p.Accepted() != 2 {
		t.Errorf("proxy accepted %d connections, want 2 (the retry reconnected)", p.Accepted())
	}
}

// The control for the test above: without retries the same cut is an UNAVAILABLE error for a
// write that was nevertheless applied, which is why a retry must carry the same request_id.
func TestNoRetryLostResponseIsUnavailable(t *testing.T) {
	addr := startServer(t)
	direct := dial(t, addr)
	p := newProxy(t, addr)
	c := dial(t, p.Addr(), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	branch := newBranch(t, direct)
	if _, err := c.History.GetBranch(testContext(t), &historyv1.GetBranchRequest{BranchId: branch}); err != nil {
		t.Fatal(err)
	}
	p.CutBeforeResponse()
	_, err := c.History.AddMessage(testContext(t), &historyv1.AddMessageRequest{BranchId: branch, Input: instruction("lost")})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("AddMessage without retries over a cut connection: %v, want UNAVAILABLE", err)
	}
	if got := head(t, direct, branch); got != 2 {
		t.Errorf("head sequence = %d, want 2: the write was applied", got)
	}
}

// A caller's own request_id is the one every attempt sends (issue 8: retries reuse it).
func TestRetryKeepsCallersRequestID(t *testing.T) {
	addr := startServer(t)
	direct := dial(t, addr)
	p := newProxy(t, addr)
	rec := &recorder{}
	c := dial(t, p.Addr(), client.WithRetry(fastRetry), rec.option())
	branch := newBranch(t, direct)
	if _, err := c.History.GetBranch(testContext(t), &historyv1.GetBranchRequest{BranchId: branch}); err != nil {
		t.Fatal(err)
	}
	rec.reset(nil)
	p.CutBeforeResponse()
	_, err := c.History.AddMessage(testContext(t), &historyv1.AddMessageRequest{BranchId: branch, RequestId: "mine-1", Input: instruction("x")})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range rec.Attempts() {
		if a.requestID != "mine-1" {
			t.Errorf("attempt sent request_id %q, want the caller's mine-1", a.requestID)
		}
	}
	if got := head(t, direct, branch); got != 2 {
		t.Errorf("head sequence = %d, want 2", got)
	}
}

// DEADLINE_EXCEEDED of one attempt (RetryPolicy.PerAttemptTimeout) is retried while the caller's
// context has time, with the same request_id: the proxy holds the first response past the
// attempt's timeout and lets it go when the second attempt starts.
func TestRetryPerAttemptTimeout(t *testing.T) {
	addr := startServer(t)
	direct := dial(t, addr)
	p := newProxy(t, addr)
	rec := &recorder{}
	policy := fastRetry
	policy.PerAttemptTimeout = time.Second // the held attempt waits it out; the others have room on a busy machine
	c := dial(t, p.Addr(), client.WithRetry(policy), rec.option())
	branch := newBranch(t, direct)
	if _, err := c.History.GetBranch(testContext(t), &historyv1.GetBranchRequest{BranchId: branch}); err != nil {
		t.Fatal(err)
	}
	held, release := p.StallBeforeResponse()
	rec.reset(func(n int, err error) {
		if n == 1 {
			<-held // the first response is held, not lost
			release()
		}
	})
	resp, err := c.History.AddMessage(testContext(t), &historyv1.AddMessageRequest{BranchId: branch, Input: instruction("slow")})
	if err != nil {
		t.Fatal(err)
	}
	attempts := rec.Attempts()
	if len(attempts) < 2 || attempts[0].code != codes.DeadlineExceeded || attempts[len(attempts)-1].code != codes.OK {
		t.Fatalf("attempts = %+v, want DEADLINE_EXCEEDED first and OK last", attempts)
	}
	for _, a := range attempts {
		if a.requestID == "" || a.requestID != attempts[0].requestID {
			t.Errorf("attempts = %+v, want one request_id throughout", attempts)
		}
	}
	if got := head(t, direct, branch); got != 2 {
		t.Errorf("head sequence = %d, want 2: applied once", got)
	}
	if resp.GetHeadSequence() != 2 {
		t.Errorf("response head_sequence = %d, want the first attempt's 2", resp.GetHeadSequence())
	}
}

// The caller's own deadline ends the call: no retry can outlive it.
func TestCallerDeadlineIsNotRetried(t *testing.T) {
	addr := startServer(t)
	p := newProxy(t, addr)
	rec := &recorder{}
	c := dial(t, p.Addr(), client.WithRetry(fastRetry), rec.option())
	branch := newBranch(t, c)
	rec.reset(nil)
	p.StallBeforeResponse()
	ctx, cancel := context.WithTimeout(testContext(t), 200*time.Millisecond)
	defer cancel()
	_, err := c.History.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: branch, Input: instruction("late")})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("AddMessage past the caller's deadline: %v, want DEADLINE_EXCEEDED", err)
	}
	if n := len(rec.Attempts()); n != 1 {
		t.Errorf("%d attempts, want 1", n)
	}
}

// Reads are retried (they change nothing).
func TestRetryReadOnly(t *testing.T) {
	addr := startServer(t)
	p := newProxy(t, addr)
	rec := &recorder{}
	c := dial(t, p.Addr(), client.WithRetry(fastRetry), rec.option())
	branch := newBranch(t, c)
	rec.reset(nil)
	p.CutBeforeResponse()
	if _, err := c.History.ListMessages(testContext(t), &historyv1.ListMessagesRequest{BranchId: branch}); err != nil {
		t.Fatalf("ListMessages with retries: %v", err)
	}
	if n := len(rec.Attempts()); n != 2 {
		t.Errorf("%d attempts, want 2", n)
	}
}

// PopMessage has no request_id: a retry after a lost response would take a second message, so it
// is never retried, and the lost response's message is gone (the reason it is not retried).
func TestNoRetryWithoutRequestID(t *testing.T) {
	addr := startServer(t)
	direct := dial(t, addr)
	p := newProxy(t, addr)
	rec := &recorder{}
	c := dial(t, p.Addr(), client.WithRetry(fastRetry), rec.option())
	ctx := testContext(t)
	a, b := "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
	for _, owner := range []string{a, b} {
		if _, err := direct.Exchange.Register(ctx, &historyv1.RegisterRequest{OwnerId: owner}); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 {
		if _, err := direct.Exchange.Send(ctx, &historyv1.SendRequest{Sender: a, Recipient: client.Participant(b), ContentJson: ptr(`"m"`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := direct.Exchange.Collect(ctx, &historyv1.CollectRequest{OwnerId: a}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exchange.ListOwners(ctx, &historyv1.ListOwnersRequest{}); err != nil {
		t.Fatal(err)
	}
	rec.reset(nil)
	p.CutBeforeResponse()
	_, err := c.Exchange.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: b, Sender: a})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("PopMessage over a cut connection: %v, want UNAVAILABLE", err)
	}
	if n := len(rec.Attempts()); n != 1 {
		t.Errorf("%d attempts, want 1: PopMessage is not retried", n)
	}
	left, err := direct.Exchange.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: b})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.GetMessages()) != 1 {
		t.Errorf("%d messages left, want 1: the cut pop took one", len(left.GetMessages()))
	}
}

func ptr[T any](v T) *T { return &v }
