package client_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/server"
	"github.com/historyd/historyd/internal/store"
)

// TestAppenderOrderAndFailures: issue 21 "The Go client gets an async appender that keeps one
// stream busy": 200 items on two branches with a window of 16 come back in the order appended,
// each branch in that order, and an item on an unknown branch fails alone.
func TestAppenderOrderAndFailures(t *testing.T) {
	c := dial(t, startServer(t))
	ctx := testContext(t)
	a, b := newBranch(t, c), newBranch(t, c)
	ap := c.NewAppender(ctx, client.WithAppendWindow(16))
	var results []<-chan client.AppendResult
	var branches []string
	for i := range 200 {
		branch := a
		switch {
		case i == 100:
			branch = "00000000-0000-4000-8000-000000000001" // no such branch
		case i%3 == 0:
			branch = b
		}
		branches = append(branches, branch)
		results = append(results, ap.Append(ctx, &historyv1.AddMessageRequest{BranchId: branch, Input: instruction(fmt.Sprint(i))}))
	}
	heads := map[string]uint64{a: 1, b: 1}
	for i, ch := range results {
		r := <-ch
		if i == 100 {
			if client.Reason(r.Err) != historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND || status.Code(r.Err) != codes.NotFound {
				t.Fatalf("item 100: %v, want NOT_FOUND BRANCH_NOT_FOUND", r.Err)
			}
			continue
		}
		if r.Err != nil {
			t.Fatalf("item %d: %v", i, r.Err)
		}
		heads[branches[i]]++
		if got := r.Response.GetHeadSequence(); got != heads[branches[i]] {
			t.Fatalf("item %d: head %d, want %d: items on a branch apply in the order appended", i, got, heads[branches[i]])
		}
	}
	if err := ap.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r := <-ap.Append(ctx, &historyv1.AddMessageRequest{BranchId: a, Input: instruction("late")}); !errors.Is(r.Err, client.ErrAppenderClosed) {
		t.Errorf("Append after Close: %v, want ErrAppenderClosed", r.Err)
	}
	if h := head(t, c, a); h != heads[a] {
		t.Errorf("branch head %d, want %d", h, heads[a])
	}
}

// TestAppenderStreamBroken: when the stream ends under it (the server shutting down), the
// Appender reports it clearly: a *StreamBrokenError carrying the status and the item's request id
// (filled in), and the next Append opens a stream again.
func TestAppenderStreamBroken(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(nil)
	hs := server.RegisterHistory(srv, store.NewMemory())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-served
	})
	c := dial(t, lis.Addr().String())
	ctx := testContext(t)
	b := newBranch(t, c)
	ap := c.NewAppender(ctx)
	if r := <-ap.Append(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: instruction("one")}); r.Err != nil {
		t.Fatal(r.Err)
	}
	hs.EndStreams() // every append stream, open or opened later, ends UNAVAILABLE SERVER_SHUTTING_DOWN
	for range 2 {   // the first Append may go out on the stream that is ending, the second on a new one
		r := <-ap.Append(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: instruction("two")})
		var broken *client.StreamBrokenError
		if !errors.As(r.Err, &broken) || broken.RequestID == "" || status.Code(r.Err) != codes.Unavailable ||
			client.Reason(r.Err) != historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN {
			t.Fatalf("Append on an ended stream: %v, want a *StreamBrokenError with the request id, UNAVAILABLE SERVER_SHUTTING_DOWN", r.Err)
		}
		// Its Request is the item to send again: the same input, with the request id it went out
		// with, so that however often it is resent it is applied once (the request given to
		// Append had none, and resending that would mint a new id).
		if broken.Request.GetRequestId() != broken.RequestID || broken.Request.GetInstruction().GetInstruction() != "two" {
			t.Fatalf("the broken item's Request: %v, want the item with request id %s", broken.Request, broken.RequestID)
		}
		first, err := c.History.AddMessage(ctx, broken.Request)
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.History.AddMessage(ctx, broken.Request)
		if err != nil || again.GetMessage().GetId() != first.GetMessage().GetId() || again.GetHeadSequence() != first.GetHeadSequence() ||
			head(t, c, b) != first.GetHeadSequence() {
			t.Fatalf("the broken item's Request sent again: %v, %v; want the first response, nothing written", again, err)
		}
	}
	if err := ap.Close(); err != nil && status.Code(err) != codes.Unavailable {
		t.Errorf("Close: %v", err)
	}
}

// An item that cannot be encoded (a string that is not UTF-8) fails alone with INVALID_ARGUMENT,
// not as a *StreamBrokenError, and the items around it, on the same stream, are written: gRPC
// ends a stream whose message it cannot marshal, so the Appender encodes each item before sending
// it (a review saw 19-20 of 20 items in flight broken by one such item).
func TestAppenderUnencodableItemFailsAlone(t *testing.T) {
	c := dial(t, startServer(t))
	ctx := testContext(t)
	b := newBranch(t, c)
	ap := c.NewAppender(ctx, client.WithAppendWindow(64))
	var results []<-chan client.AppendResult
	for i := range 41 {
		text := fmt.Sprint("item ", i)
		if i == 20 {
			text = "not UTF-8: \xff"
		}
		results = append(results, ap.Append(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: instruction(text)}))
	}
	for i, ch := range results {
		r := <-ch
		var broken *client.StreamBrokenError
		switch {
		case i == 20 && (status.Code(r.Err) != codes.InvalidArgument || errors.As(r.Err, &broken)):
			t.Fatalf("the item that cannot be encoded: %v, want INVALID_ARGUMENT, alone", r.Err)
		case i != 20 && r.Err != nil:
			t.Fatalf("item %d: %v, want it written", i, r.Err)
		}
	}
	if err := ap.Close(); err != nil {
		t.Fatal(err)
	}
	if h := head(t, c, b); h != 41 { // BRANCH_CREATED and the 40 items written
		t.Fatalf("branch head %d, want 41", h)
	}
}
