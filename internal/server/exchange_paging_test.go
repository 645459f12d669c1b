package server

import (
	"encoding/base64"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TestExchangePageTokenBoundToItsListing: a Receive or ListDeadLetters page token continues the
// request that made it (AIP-158): its positions index one owner's inboxes (under one sender
// filter) or dead letters, so another owner's or another filter's listing refuses it
// (INVALID_ARGUMENT, page_token) instead of silently skipping that listing's first messages
// (hostile review, 2026-12-07). A token made before tokens named their scope still continues.
func TestExchangePageTokenBoundToItsListing(t *testing.T) {
	f := newExchangeFixture(t, nil)
	ctx := testContext(t)
	a, b, c := uuid.NewString(), uuid.NewString(), uuid.NewString()
	f.register(t, a, b, c)
	for range 3 {
		f.send(t, a, str(b), `"to b"`)
		f.send(t, a, str(c), `"to c"`)
		f.send(t, a, str("nobody"), `"dropped"`) // a's dead letters: not an owner
	}
	f.collect(t, a)

	page, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: b, PageSize: 1})
	if err != nil {
		t.Fatal(err)
	}
	tok := page.GetNextPageToken()
	if tok == "" {
		t.Fatal("no next page token after 1 of 3 messages")
	}
	// The same listing continues.
	if next, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: b, PageSize: 1, PageToken: tok}); err != nil || len(next.GetMessages()) != 1 {
		t.Fatalf("Receive(b, its own token) = %v, %v; want the next message", next, err)
	}
	refused := map[string]*historyv1.ReceiveRequest{
		"another owner":          {OwnerId: c, PageSize: 1, PageToken: tok},
		"a sender filter added":  {OwnerId: b, Sender: proto.String(a), PageSize: 1, PageToken: tok},
		"another sender filter":  {OwnerId: b, Sender: proto.String(c), PageSize: 1},
		"the filter then a none": {OwnerId: b, PageSize: 1},
	}
	// The last two read a token of b filtered by sender a, then use it elsewhere.
	filtered, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: b, Sender: proto.String(a), PageSize: 1})
	if err != nil || filtered.GetNextPageToken() == "" {
		t.Fatalf("Receive(b, sender a) = %v, %v; want a page with a next token", filtered, err)
	}
	refused["another sender filter"].PageToken = filtered.GetNextPageToken()
	refused["the filter then a none"].PageToken = filtered.GetNextPageToken()
	for name, req := range refused {
		t.Run("Receive "+name, func(t *testing.T) {
			_, err := f.client.Receive(ctx, req)
			checkStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, map[string]string{"field": "page_token"})
		})
	}

	dead, err := f.client.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: a, PageSize: 1})
	if err != nil || dead.GetNextPageToken() == "" {
		t.Fatalf("ListDeadLetters(a) = %v, %v; want a page with a next token", dead, err)
	}
	_, err = f.client.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: b, PageSize: 1, PageToken: dead.GetNextPageToken()})
	checkStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, map[string]string{"field": "page_token"})

	// A token of the earlier form ("x1.<list>.<n>.<n>", no scope) is still read.
	legacy := base64.RawURLEncoding.EncodeToString([]byte("x1.inbox.0.0"))
	if _, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: c, PageToken: legacy}); err != nil {
		t.Fatalf("Receive with a token of the earlier form: %v", err)
	}
}
