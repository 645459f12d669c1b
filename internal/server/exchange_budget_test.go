package server

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
)

// inboxLen is the number of messages in owner's inboxes, read through the Exchange.
func (f *exchangeFixture) inboxLen(owner string) int {
	n := 0
	for _, o := range f.ex.Owners(0, 0).Owners {
		if o.ID.String() == owner {
			n = o.Inbox
		}
	}
	return n
}

// TestExchangePopMessageTooLargeRemovesNothing (issue 11 case 3: a destructive read never loses
// what it could not deliver): a message whose response with its rendering exceeds the response
// budget is refused with RESOURCE_EXHAUSTED, RESPONSE_TOO_LARGE and figures, and stays in the
// inbox; popped with omit_rendered (about half the size) it comes out whole.
func TestExchangePopMessageTooLargeRemovesNothing(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.es.maxResponse = 3_000
	f.register(t, ownerA, ownerB)
	sent := f.send(t, ownerA, str(ownerB), `"`+strings.Repeat("p", 1_800)+`"`)
	f.collect(t, ownerA)
	ctx := testContext(t)

	_, err := f.client.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: ownerB, Sender: ownerA})
	md := errorInfoOf(err).GetMetadata()
	size, _ := strconv.Atoi(md["responseBytes"])
	checkStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE, map[string]string{
		"responseBytes": md["responseBytes"], "maxResponseBytes": "3000", "flag": "--max-response-bytes", "messageId": sent.GetId(),
	})
	if size <= 3_000 {
		t.Errorf("responseBytes %d, want over the budget", size)
	}
	if n := f.inboxLen(ownerB); n != 1 {
		t.Fatalf("after the refused pop B's inbox holds %d messages, want 1", n)
	}

	got, err := f.client.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: ownerB, Sender: ownerA, OmitRendered: true})
	if err != nil || got.GetMessage().GetId() != sent.GetId() || got.GetMessage().GetRendered() != nil {
		t.Fatalf("PopMessage(omit_rendered) = %v, %v; want the message without rendered", got.GetMessage().GetId(), err)
	}
	if proto.Size(got) > f.es.maxResponse {
		t.Errorf("response of %d bytes over the budget", proto.Size(got))
	}
	if n := f.inboxLen(ownerB); n != 0 {
		t.Errorf("after the pop B's inbox holds %d messages", n)
	}
}

// TestExchangeReceivePagesWithinBudget (issue 11: pages come back shorter instead of failing where
// at least one item fits; next_page_token continues): page_size 1000 over 30 messages with a small
// budget reads every message once, in order, each page within the budget; a first message that
// alone does not fit is RESPONSE_TOO_LARGE naming it, and omit_rendered reads it.
func TestExchangeReceivePagesWithinBudget(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.es.maxResponse = 6_000
	f.register(t, ownerA, ownerB)
	var want []string
	for range 30 {
		want = append(want, f.send(t, ownerA, str(ownerB), `"`+strings.Repeat("r", 400)+`"`).GetId())
	}
	f.collect(t, ownerA)
	ctx := testContext(t)
	var got []string
	pages := 0
	for token := ""; ; {
		resp, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: ownerB, PageSize: 1000, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		if n := proto.Size(resp); n > f.es.maxResponse {
			t.Errorf("page of %d bytes, over the budget %d", n, f.es.maxResponse)
		}
		pages++
		for _, m := range resp.GetMessages() {
			got = append(got, m.GetId())
		}
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") || pages < 2 {
		t.Errorf("read %d messages in %d pages, want the 30 in order over several pages", len(got), pages)
	}

	big := f.send(t, ownerA, str(ownerC), `"`+strings.Repeat("B", 4_000)+`"`)
	f.register(t, ownerC)
	f.collect(t, ownerA)
	_, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: ownerC})
	md := errorInfoOf(err).GetMetadata()
	checkStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE, map[string]string{
		"responseBytes": md["responseBytes"], "maxResponseBytes": "6000", "flag": "--max-response-bytes", "messageId": big.GetId(),
	})
	resp, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: ownerC, OmitRendered: true})
	if err != nil || len(resp.GetMessages()) != 1 || resp.GetMessages()[0].GetRendered() != nil {
		t.Errorf("Receive(omit_rendered) = %d messages, %v", len(resp.GetMessages()), err)
	}
}

// TestExchangeListOwnersWithinBudget: ListOwners pages shrink to the budget and continue.
func TestExchangeListOwnersWithinBudget(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.es.maxResponse = 1_000
	owners := []string{ownerA, ownerB, ownerC, ownerD}
	for range 20 {
		owners = append(owners, uuid.NewString())
	}
	f.register(t, owners...)
	ctx := testContext(t)
	n, pages := 0, 0
	for token := ""; ; {
		pages++
		resp, err := f.client.ListOwners(ctx, &historyv1.ListOwnersRequest{PageSize: 1000, PageToken: token})
		if err != nil || proto.Size(resp) > f.es.maxResponse {
			t.Fatalf("ListOwners = %d bytes, %v", proto.Size(resp), err)
		}
		n += len(resp.GetOwners())
		if token = resp.GetNextPageToken(); token == "" {
			break
		}
	}
	if n != len(owners) || pages < 2 {
		t.Errorf("listed %d owners in %d pages, want %d over several", n, pages, len(owners))
	}
}

// TestExchangeSendBudgetExceeded (issue 11 case 7: past the budget Send fails RESOURCE_EXHAUSTED
// with figures): the ErrorInfo gives the bytes used, the budget, the message's bytes and the flag.
func TestExchangeSendBudgetExceeded(t *testing.T) {
	f := newExchangeFixture(t, []exchange.Option{exchange.WithByteBudget(8 << 10)})
	f.register(t, ownerA, ownerB)
	ctx := testContext(t)
	body := `"` + strings.Repeat("s", 2_000) + `"`
	var err error
	sent := 0
	for ; sent < 100; sent++ {
		if _, err = f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: str(ownerB), ContentJson: &body}); err != nil {
			break
		}
	}
	md := errorInfoOf(err).GetMetadata()
	checkStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_EXCHANGE_BUDGET_EXCEEDED, map[string]string{
		"usedBytes": md["usedBytes"], "budgetBytes": "8192", "messageBytes": md["messageBytes"], "flag": "--exchange-max-bytes",
	})
	used, _ := strconv.Atoi(md["usedBytes"])
	need, _ := strconv.Atoi(md["messageBytes"])
	if sent == 0 || used+need <= 8192 || need < 2_000 {
		t.Errorf("after %d sends: used %d + message %d, want over 8192", sent, used, need)
	}
	if s := f.ex.Stats(); s.Queued != sent {
		t.Errorf("%d queued after %d successful sends", s.Queued, sent)
	}
}

// TestExchangeSendRepeatAfterConsumed (issue 11 case 7: the request-id log keeps what a repeat
// needs): a retry of the same Send after its message was collected and popped returns the first
// response exactly, and queues nothing.
func TestExchangeSendRepeatAfterConsumed(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerA, ownerB)
	ctx := testContext(t)
	body := `{"k": [1, 2, "three"]}`
	req := &historyv1.SendRequest{Sender: ownerA, Recipient: str(ownerB), ContentJson: &body, RequestId: "again"}
	first, err := f.client.Send(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	f.collect(t, ownerA)
	if _, err := f.client.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: ownerB, Sender: ownerA}); err != nil {
		t.Fatal(err)
	}
	again, err := f.client.Send(ctx, req)
	if err != nil || !proto.Equal(again, first) {
		t.Errorf("repeat after the pop = %v, %v\nwant %v", again, err, first)
	}
	if st := f.ex.Stats(); st.Queued != 0 {
		t.Errorf("the repeat queued %d messages", st.Queued)
	}
}

// TestExchangeSubscribeInboxLimit (issue 11 case 7: SubscribeInbox gets a stream limit like
// WatchBranch's): past it the call is RESOURCE_EXHAUSTED, TOO_MANY_STREAMS, naming the flag; a
// closed stream frees its place.
func TestExchangeSubscribeInboxLimit(t *testing.T) {
	f := newExchangeFixture(t, []exchange.Option{exchange.WithMaxSubscriptions(1)})
	f.register(t, ownerA)
	ended := f.streamEnd()
	ctx := testContext(t)
	firstCtx, cancelFirst := contextWithCancel(t)
	subscribe(firstCtx, t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerA})
	s, err := f.client.SubscribeInbox(ctx, &historyv1.SubscribeInboxRequest{OwnerId: ownerA})
	if err != nil {
		t.Fatal(err)
	}
	err = recvEnd(s)
	// Review of issue 11, finding 3: the counts beside the flag, in the metadata and the text.
	checkStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS,
		map[string]string{"flag": "--inbox-max-streams", "openStreams": "1", "maxStreams": "1"})
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "1 open, at most 1") || !strings.Contains(msg, "--inbox-max-streams") {
		t.Errorf("message %q, want the counts and the flag", msg)
	}
	wait(t, ended) // the refused stream's end
	cancelFirst()
	wait(t, ended) // the first stream's end: its place is free
	subscribe(ctx, t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerA, OmitRendered: true})
}

// TestExchangeSendLargeAcknowledged (issue 11 case 3, the Send side): a message whose response
// with its rendering would exceed the response budget is queued and acknowledged without the
// rendering; one whose response could not fit even so is refused before anything is queued.
func TestExchangeSendLargeAcknowledged(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.es.maxResponse = 5_000
	f.register(t, ownerA, ownerB)
	ctx := testContext(t)
	body := `"` + strings.Repeat("a", 3_000) + `"`
	resp, err := f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: str(ownerB), ContentJson: &body})
	if err != nil || resp.GetMessage().GetRendered() != nil || resp.GetMessage().GetGeneric().GetContentJson() != body {
		t.Fatalf("Send of a message over half the budget = %v, %v; want it whole without rendered", resp, err)
	}
	if n := proto.Size(resp); n > f.es.maxResponse {
		t.Errorf("Send's response of %d bytes, over the budget", n)
	}
	small := `"small"`
	if resp, err := f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: str(ownerB), ContentJson: &small}); err != nil ||
		resp.GetMessage().GetRendered() == nil {
		t.Errorf("Send of a small message = %v, %v; want it rendered", resp, err)
	}
	huge := `"` + strings.Repeat("h", 6_000) + `"`
	_, err = f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: str(ownerB), ContentJson: &huge})
	md := errorInfoOf(err).GetMetadata()
	checkStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE, map[string]string{
		"responseBytes": md["responseBytes"], "maxResponseBytes": "5000", "flag": "--max-response-bytes",
	})
	if st := f.ex.Stats(); st.Queued != 2 {
		t.Errorf("%d messages queued, want the 2 acknowledged", st.Queued)
	}
}

// TestSubscribeInboxFrameTooLarge (issue 11: the response budget bounds every stream frame): a
// message whose frame would exceed the budget ends the stream with RESOURCE_EXHAUSTED,
// RESPONSE_TOO_LARGE naming it, and stays in the inbox; a stream with omit_rendered carries it.
func TestSubscribeInboxFrameTooLarge(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.es.maxResponse = 5_000
	f.register(t, ownerA, ownerB)
	ctx := testContext(t)
	rendered := subscribe(ctx, t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerB})
	plain := subscribe(ctx, t, f.client, &historyv1.SubscribeInboxRequest{OwnerId: ownerB, OmitRendered: true})
	sent := f.send(t, ownerA, str(ownerB), `"`+strings.Repeat("q", 3_000)+`"`)
	f.collect(t, ownerA)

	err := recvEnd(rendered)
	md := errorInfoOf(err).GetMetadata()
	checkStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_RESPONSE_TOO_LARGE, map[string]string{
		"responseBytes": md["responseBytes"], "maxResponseBytes": "5000", "flag": "--max-response-bytes", "messageId": sent.GetId(),
	})
	if m := nextMessage(t, plain); m.GetId() != sent.GetId() || m.GetRendered() != nil {
		t.Errorf("omit_rendered stream got %v, want the message without rendered", m.GetId())
	}
	if n := f.inboxLen(ownerB); n != 1 {
		t.Errorf("B's inbox holds %d messages, want the one the stream could not carry", n)
	}
}
