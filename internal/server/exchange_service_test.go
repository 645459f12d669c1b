package server

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
)

// Owners used throughout, spelled like the vectors' fixed UUIDs.
const (
	ownerA = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
	ownerB = "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
	ownerC = "cccccccc-cccc-4ccc-8ccc-cccccccccccc"
	ownerD = "dddddddd-dddd-4ddd-8ddd-dddddddddddd"
)

// exchangeFixture is an ExchangeService served over bufconn with the production interceptors.
type exchangeFixture struct {
	*testServer
	ex     *exchange.Exchange
	es     *ExchangeServer
	client historyv1.ExchangeServiceClient
}

// newExchangeFixture serves a new Exchange built with exOpts; streamOpts configure SubscribeInbox.
func newExchangeFixture(t *testing.T, exOpts []exchange.Option, streamOpts ...StreamOption) *exchangeFixture {
	t.Helper()
	return newExchangeFixtureOver(t, exOpts, nil, streamOpts...)
}

// newExchangeFixtureOver is newExchangeFixture serving wrap(the memory engine) when wrap is not
// nil: a test's stand-in for an engine that answers otherwise.
func newExchangeFixtureOver(t *testing.T, exOpts []exchange.Option, wrap func(exchange.Service) exchange.Service, streamOpts ...StreamOption) *exchangeFixture {
	t.Helper()
	ex := exchange.New(exOpts...)
	t.Cleanup(ex.Close)
	var svc exchange.Service = &exchange.MemoryService{X: ex}
	if wrap != nil {
		svc = wrap(svc)
	}
	es := NewExchangeServer(svc, streamOpts...)
	ts := newTestServer(t, func(gs *grpc.Server) { historyv1.RegisterExchangeServiceServer(gs, es) })
	ts.OnShutdown(es.EndStreams) // as RegisterExchange does
	return &exchangeFixture{testServer: ts, ex: ex, es: es, client: historyv1.NewExchangeServiceClient(ts.conn)}
}

func (f *exchangeFixture) register(t *testing.T, owners ...string) {
	t.Helper()
	for _, o := range owners {
		if _, err := f.client.Register(testContext(t), &historyv1.RegisterRequest{OwnerId: o}); err != nil {
			t.Fatalf("Register(%s): %v", o, err)
		}
	}
}

// send sends content (JSON text) from sender to rcpt (nil: absent, i.e. UNSET).
func (f *exchangeFixture) send(t *testing.T, sender string, rcpt *structpb.Value, content string) *historyv1.Message {
	t.Helper()
	resp, err := f.client.Send(testContext(t), &historyv1.SendRequest{Sender: sender, Recipient: rcpt, ContentJson: proto.String(content)})
	if err != nil {
		t.Fatalf("Send(%s): %v", sender, err)
	}
	return resp.GetMessage()
}

// listOwners pages through ListOwners, pageSize owners a page and at most 5 pages, and returns the
// owner ids in order.
func (f *exchangeFixture) listOwners(ctx context.Context, t *testing.T, pageSize int32) []string {
	t.Helper()
	var owners []string
	token := ""
	for range 5 {
		page, err := f.client.ListOwners(ctx, &historyv1.ListOwnersRequest{PageSize: pageSize, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range page.GetOwners() {
			owners = append(owners, o.GetOwnerId())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	return owners
}

func (f *exchangeFixture) collect(t *testing.T, owner string) *historyv1.CollectResponse {
	t.Helper()
	resp, err := f.client.Collect(testContext(t), &historyv1.CollectRequest{OwnerId: owner})
	if err != nil {
		t.Fatalf("Collect(%s): %v", owner, err)
	}
	return resp
}

func str(s string) *structpb.Value { return structpb.NewStringValue(s) }

var broadcast = structpb.NewNullValue()

// TestExchangeBadInput: malformed UUIDs, a missing sender, content that is not JSON and other
// malformed fields are INVALID_ARGUMENT naming the field; an unregistered sender or collector is
// FAILED_PRECONDITION with OWNER_NOT_REGISTERED; a duplicate Register is ALREADY_EXISTS; a full
// outbox is RESOURCE_EXHAUSTED (issue 6 "Bad input"; ADR-0006 D5).
func TestExchangeBadInput(t *testing.T) {
	f := newExchangeFixture(t, []exchange.Option{exchange.WithMaxOutbox(1)})
	f.register(t, ownerA)
	f.send(t, ownerA, str(ownerB), `"fills the outbox"`)
	ctx := testContext(t)
	invalid := func(field string) func(error) (codes.Code, historyv1.ErrorReason, map[string]string) {
		return func(error) (codes.Code, historyv1.ErrorReason, map[string]string) {
			return codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, map[string]string{"field": field}
		}
	}
	owner := func(code codes.Code, reason historyv1.ErrorReason, id string) func(error) (codes.Code, historyv1.ErrorReason, map[string]string) {
		return func(error) (codes.Code, historyv1.ErrorReason, map[string]string) {
			return code, reason, map[string]string{"ownerId": id}
		}
	}
	notRegistered := historyv1.ErrorReason_ERROR_REASON_OWNER_NOT_REGISTERED
	tests := []struct {
		name string
		call func() error
		want func(error) (codes.Code, historyv1.ErrorReason, map[string]string)
	}{
		{"register a plain-string owner", func() error {
			_, err := f.client.Register(ctx, &historyv1.RegisterRequest{OwnerId: "alice"})
			return err
		}, invalid("owner_id")},
		{"register nobody", func() error {
			_, err := f.client.Register(ctx, &historyv1.RegisterRequest{})
			return err
		}, invalid("owner_id")},
		{"duplicate register", func() error {
			_, err := f.client.Register(ctx, &historyv1.RegisterRequest{OwnerId: ownerA})
			return err
		}, owner(codes.AlreadyExists, historyv1.ErrorReason_ERROR_REASON_OWNER_ALREADY_REGISTERED, ownerA)},
		{"send without sender", func() error {
			_, err := f.client.Send(ctx, &historyv1.SendRequest{Recipient: str(ownerB)})
			return err
		}, invalid("sender")},
		{"send from a malformed UUID", func() error {
			_, err := f.client.Send(ctx, &historyv1.SendRequest{Sender: "aaaaaaaa-aaaa"})
			return err
		}, invalid("sender")},
		{"send content that is not JSON", func() error {
			_, err := f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, ContentJson: proto.String("{not json")})
			return err
		}, invalid("content_json")},
		{"send a numeric recipient", func() error {
			_, err := f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: structpb.NewNumberValue(1)})
			return err
		}, invalid("recipient")},
		{"send an over-long request id", func() error {
			_, err := f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, RequestId: string(make([]byte, 300))})
			return err
		}, invalid("request_id")},
		{"send from an unregistered sender", func() error {
			_, err := f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerC})
			return err
		}, owner(codes.FailedPrecondition, notRegistered, ownerC)},
		{"send into a full outbox", func() error {
			_, err := f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA})
			return err
		}, func(error) (codes.Code, historyv1.ErrorReason, map[string]string) {
			// Review of issue 11, finding 3: the figures and the flag beside the owner.
			return codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_OUTBOX_FULL, map[string]string{
				"ownerId": ownerA, "queuedCount": "1", "maxOutbox": "1", "flag": "--exchange-max-outbox"}
		}},
		{"collect an unregistered owner", func() error {
			_, err := f.client.Collect(ctx, &historyv1.CollectRequest{OwnerId: ownerC})
			return err
		}, owner(codes.FailedPrecondition, notRegistered, ownerC)},
		{"collect a malformed owner", func() error {
			_, err := f.client.Collect(ctx, &historyv1.CollectRequest{OwnerId: "zz"})
			return err
		}, invalid("owner_id")},
		{"receive with a malformed sender", func() error {
			_, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: ownerA, Sender: proto.String("bob")})
			return err
		}, invalid("sender")},
		{"pop without sender", func() error {
			_, err := f.client.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: ownerA})
			return err
		}, invalid("sender")},
		{"negative page size", func() error {
			_, err := f.client.ListOwners(ctx, &historyv1.ListOwnersRequest{PageSize: -1})
			return err
		}, invalid("page_size")},
		{"page token of another list", func() error {
			_, err := f.client.ListOwners(ctx, &historyv1.ListOwnersRequest{PageToken: encodeExchangeToken("dead", ownersScope, 1, 0)})
			return err
		}, invalid("page_token")},
		{"garbage page token", func() error {
			_, err := f.client.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: ownerA, PageToken: "%%%"})
			return err
		}, invalid("page_token")},
		{"subscribe to an unregistered owner", func() error {
			s, err := f.client.SubscribeInbox(ctx, &historyv1.SubscribeInboxRequest{OwnerId: ownerD})
			if err != nil {
				return err
			}
			_, err = s.Recv()
			return err
		}, owner(codes.FailedPrecondition, notRegistered, ownerD)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			code, reason, md := tc.want(err)
			checkStatus(t, err, code, reason, md)
		})
	}
}

// TestExchangeDeliveryReportAndDeadLetters: over gRPC, Collect reports each message's outcome and
// every drop reason lands in the sender's dead letters with its recipient and time (
// docs/design.md#exchange; issue 6 acceptance).
func TestExchangeDeliveryReportAndDeadLetters(t *testing.T) {
	f := newExchangeFixture(t, []exchange.Option{exchange.WithMaxInbox(1)})
	f.register(t, ownerA, ownerB, ownerC)
	fill := f.send(t, ownerA, str(ownerB), `"fills B's inbox from A"`)
	f.send(t, ownerA, str(ownerC), `"leaves"`)
	if _, err := f.client.Unregister(testContext(t), &historyv1.UnregisterRequest{OwnerId: ownerC}); err != nil {
		t.Fatal(err)
	}
	// recipient (nil: absent), the recipient the drop names (as JSON text), and the reason.
	drops := []struct {
		rcpt   *structpb.Value
		names  string
		reason historyv1.DeadLetterReason
	}{
		{str(ownerC), `"` + ownerC + `"`, historyv1.DeadLetterReason_DEAD_LETTER_REASON_RECIPIENT_LEFT},
		{nil, `"unset"`, historyv1.DeadLetterReason_DEAD_LETTER_REASON_UNSET_RECIPIENT},
		{str(ownerD), `"` + ownerD + `"`, historyv1.DeadLetterReason_DEAD_LETTER_REASON_UNKNOWN_RECIPIENT},
		{str("bob"), `"bob"`, historyv1.DeadLetterReason_DEAD_LETTER_REASON_NOT_A_UUID},
		{str(ownerB), `"` + ownerB + `"`, historyv1.DeadLetterReason_DEAD_LETTER_REASON_INBOX_FULL},
	}
	var ids []string
	for _, d := range drops[1:] { // the recipient-left message was sent before C left
		ids = append(ids, f.send(t, ownerA, d.rcpt, `"x"`).GetId())
	}
	rep := f.collect(t, ownerA)
	if rep.GetDeliveredCount() != 1 || len(rep.GetDeliveries()) != len(drops)+1 {
		t.Fatalf("report %v, want 1 delivered of %d", rep, len(drops)+1)
	}
	first := rep.GetDeliveries()[0]
	if first.GetMessageId() != fill.GetId() || first.GetReachedCount() != 1 || len(first.GetReachedOwnerIds()) != 0 {
		t.Errorf("first delivery %v, want reached 1 owner, no ids unless asked for", first)
	}
	if rep.GetCollectedCount() != int32(len(drops)+1) || rep.GetDropCount() != int32(len(drops)) || rep.GetReportTruncated() {
		t.Errorf("report counts %d collected, %d drops, truncated %v; want %d, %d, false",
			rep.GetCollectedCount(), rep.GetDropCount(), rep.GetReportTruncated(), len(drops)+1, len(drops))
	}
	letters, err := f.client.ListDeadLetters(testContext(t), &historyv1.ListDeadLettersRequest{OwnerId: ownerA})
	if err != nil {
		t.Fatal(err)
	}
	if len(letters.GetDeadLetters()) != len(drops) || letters.GetEvictedCount() != 0 {
		t.Fatalf("dead letters %v, want %d", letters, len(drops))
	}
	for i, d := range drops {
		got := rep.GetDeliveries()[i+1]
		if got.GetReachedCount() != 0 || len(got.GetDrops()) != 1 || got.GetDrops()[0].GetReason() != d.reason {
			t.Errorf("delivery %d = %v, want one drop %v", i+1, got, d.reason)
			continue
		}
		if r := valueJSON(got.GetDrops()[0].GetRecipient()); r != d.names {
			t.Errorf("drop %v names %s, want %s", d.reason, r, d.names)
		}
		dl := letters.GetDeadLetters()[i]
		if dl.GetReason() != d.reason || valueJSON(dl.GetRecipient()) != d.names || dl.GetMessage().GetId() != got.GetMessageId() ||
			!dl.GetDeadAt().IsValid() || dl.GetDeadAt().AsTime().IsZero() {
			t.Errorf("dead letter %d = %v, want %v for %s", i, dl, d.reason, d.names)
		}
		if i > 0 && dl.GetMessage().GetId() != ids[i-1] {
			t.Errorf("dead letter %d is %s, want %s", i, dl.GetMessage().GetId(), ids[i-1])
		}
	}

	// A broadcast alone: no recipients, named null.
	solo := newExchangeFixture(t, nil)
	solo.register(t, ownerA)
	solo.send(t, ownerA, broadcast, `"solo"`)
	if r := solo.collect(t, ownerA); r.GetDeliveredCount() != 0 || r.GetDeliveries()[0].GetDrops()[0].GetReason() != historyv1.DeadLetterReason_DEAD_LETTER_REASON_NO_RECIPIENTS ||
		valueJSON(r.GetDeliveries()[0].GetDrops()[0].GetRecipient()) != "null" {
		t.Errorf("solo broadcast report %v, want one drop for null with NO_RECIPIENTS", r)
	}
}

func valueJSON(v *structpb.Value) string {
	b, _ := v.MarshalJSON()
	return string(b)
}

// TestExchangeSendRequestID: a repeated Send request_id queues nothing and returns the first
// response, even with a different payload or content that would not parse (
// docs/design.md#branches, the idempotency rule: the repeat check comes first; AIP-155).
func TestExchangeSendRequestID(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerA, ownerB)
	ctx := testContext(t)
	first, err := f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: str(ownerB), ContentJson: proto.String(`"once"`), RequestId: "req-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, content := range []string{`"twice"`, `{not json`} {
		again, err := f.client.Send(ctx, &historyv1.SendRequest{Sender: ownerA, Recipient: str(ownerC), ContentJson: proto.String(content), RequestId: "req-1"})
		if err != nil {
			t.Fatalf("repeat with %s: %v", content, err)
		}
		if !proto.Equal(again, first) {
			t.Errorf("repeat with %s = %v, want the first response %v", content, again, first)
		}
	}
	owners, err := f.client.ListOwners(ctx, &historyv1.ListOwnersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if q := owners.GetOwners()[0].GetQueuedCount(); q != 1 {
		t.Errorf("A has %d queued, want 1", q)
	}
	if rep := f.collect(t, ownerA); len(rep.GetDeliveries()) != 1 || rep.GetDeliveries()[0].GetMessageId() != first.GetMessage().GetId() {
		t.Errorf("collect %v, want only the first message", rep)
	}
}

// TestExchangeFlowOverGRPC: the D5 round trip over gRPC — register, direct and broadcast send,
// collect, receive (optionally by sender, in pages), pop, unregister returning what was held, and
// ListOwners in registration order, in pages (ADR-0006 D5).
func TestExchangeFlowOverGRPC(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerC, ownerA, ownerB)
	ctx := testContext(t)
	reg, err := f.client.Register(ctx, &historyv1.RegisterRequest{OwnerId: "{DDDDDDDD-DDDD-4DDD-8DDD-DDDDDDDDDDDD}"})
	if err != nil || reg.GetFlow().GetOwnerId() != ownerD {
		t.Fatalf("Register(braced uppercase) = %v, %v; want owner %s (UUID text normalised)", reg, err, ownerD)
	}
	m1 := f.send(t, ownerA, str(ownerB), `{"text":"m1"}`)
	all := f.send(t, ownerA, broadcast, `{"text":"hello all"}`)
	if got := m1.GetSender().GetStringValue(); got != ownerA || m1.GetRole() != historyv1.MessageRole_MESSAGE_ROLE_UNSET {
		t.Errorf("sent message sender %q role %v", got, m1.GetRole())
	}
	rep, err := f.client.Collect(ctx, &historyv1.CollectRequest{OwnerId: ownerA, IncludeReachedOwnerIds: true})
	if err != nil || rep.GetDeliveredCount() != 2 || rep.GetDeliveries()[1].GetReachedCount() != 3 ||
		!slices.Equal(rep.GetDeliveries()[1].GetReachedOwnerIds(), []string{ownerC, ownerB, ownerD}) {
		t.Errorf("collect %v, %v; want 2 delivered, the broadcast to C, B, D in registration order", rep, err)
	}
	f.send(t, ownerC, str(ownerB), `"from C"`)
	all2, err := f.client.CollectAll(ctx, &historyv1.CollectAllRequest{})
	if err != nil || all2.GetDeliveredCount() != 1 || len(all2.GetCollects()) != 1 || all2.GetCollects()[0].GetOwnerId() != ownerC {
		t.Errorf("CollectAll = %v, %v", all2, err)
	}

	var got []string
	token := ""
	for range 5 {
		page, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: ownerB, PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page.GetMessages() {
			got = append(got, m.GetId())
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if want := []string{m1.GetId(), all.GetId()}; len(got) != 3 || !slices.Equal(got[:2], want) {
		t.Errorf("B receives %v, want A's inbox (%v) then C's", got, want)
	}
	byC, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: ownerB, Sender: proto.String(ownerC)})
	if err != nil || len(byC.GetMessages()) != 1 {
		t.Errorf("Receive(B, sender C) = %v, %v", byC, err)
	}
	pop, err := f.client.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: ownerB, Sender: ownerA})
	if err != nil || pop.GetMessage().GetId() != m1.GetId() {
		t.Errorf("PopMessage = %v, %v; want m1", pop, err)
	}
	none, err := f.client.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: ownerD, Sender: ownerB})
	if err != nil || none.Message != nil {
		t.Errorf("PopMessage of a missing inbox = %v, %v; want no message", none, err)
	}

	gone, err := f.client.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: ownerB})
	if err != nil {
		t.Fatal(err)
	}
	fl := gone.GetFlow()
	if fl.GetOwnerId() != ownerB || len(fl.GetInboxes()) != 2 || fl.GetInboxes()[0].GetSender() != ownerA ||
		len(fl.GetInboxes()[0].GetMessages()) != 1 || fl.GetInboxes()[0].GetMessages()[0].GetId() != all.GetId() {
		t.Errorf("Unregister(B) returned %v, want A's inbox with the broadcast, then C's", fl)
	}
	again, err := f.client.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: ownerB})
	if err != nil || again.Flow != nil {
		t.Errorf("second Unregister = %v, %v; want no flow", again, err)
	}

	owners := f.listOwners(ctx, t, 2)
	if want := []string{ownerC, ownerA, ownerD}; !slices.Equal(owners, want) {
		t.Errorf("ListOwners = %v, want %v", owners, want)
	}
}

// TestExchangeDeadLetterPages: ListDeadLetters pages oldest first and reports the evictions of the
// per-owner bound.
func TestExchangeDeadLetterPages(t *testing.T) {
	f := newExchangeFixture(t, []exchange.Option{exchange.WithMaxDeadLetters(3)})
	f.register(t, ownerA)
	for range 5 {
		f.send(t, ownerA, str("bob"), `1`)
	}
	f.collect(t, ownerA)
	ctx := testContext(t)
	p1, err := f.client.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: ownerA, PageSize: 2})
	if err != nil || len(p1.GetDeadLetters()) != 2 || p1.GetNextPageToken() == "" || p1.GetEvictedCount() != 2 {
		t.Fatalf("page 1 = %v, %v", p1, err)
	}
	p2, err := f.client.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: ownerA, PageSize: 2, PageToken: p1.GetNextPageToken()})
	if err != nil || len(p2.GetDeadLetters()) != 1 || p2.GetNextPageToken() != "" {
		t.Fatalf("page 2 = %v, %v", p2, err)
	}
	unknown, err := f.client.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: ownerD})
	if err != nil || len(unknown.GetDeadLetters()) != 0 {
		t.Errorf("dead letters of an unknown owner = %v, %v; want none", unknown, err)
	}
}

// TestDeadLetterReasons: every exchange drop reason has a wire value, and they are distinct.
func TestDeadLetterReasons(t *testing.T) {
	seen := map[historyv1.DeadLetterReason]bool{}
	for _, r := range exchange.Reasons() {
		p, ok := reasonToProto[r]
		if !ok || p == historyv1.DeadLetterReason_DEAD_LETTER_REASON_UNSPECIFIED || seen[p] {
			t.Errorf("reason %v maps to %v", r, p)
		}
		seen[p] = true
	}
	if len(seen) != len(historyv1.DeadLetterReason_name)-1 {
		t.Errorf("%d reasons mapped, the enum has %d specified values", len(seen), len(historyv1.DeadLetterReason_name)-1)
	}
}

// TestExchangeConvertedMessagesFieldCount is etcd's trick for the exchange converters: a new field
// breaks this test until convert_exchange.go handles it and the count here is raised.
func TestExchangeConvertedMessagesFieldCount(t *testing.T) {
	checkFieldCounts(t, "convert_exchange.go / exchange_service.go", []fieldCount{
		{&historyv1.Flow{}, 5},
		{&historyv1.Inbox{}, 2},
		{&historyv1.DeadLetter{}, 5},
		{&historyv1.Drop{}, 2},
		{&historyv1.MessageDelivery{}, 4},
		{&historyv1.OwnerCollect{}, 5},
		{&historyv1.CollectRequest{}, 2},
		{&historyv1.CollectResponse{}, 5},
		{&historyv1.CollectAllRequest{}, 1},
		{&historyv1.CollectAllResponse{}, 3},
		{&historyv1.Owner{}, 3},
		{&historyv1.SendRequest{}, 5},
		{&historyv1.UnregisterRequest{}, 3},
		{&historyv1.ReceiveRequest{}, 5},
		{&historyv1.PopMessageRequest{}, 3},
		{&historyv1.SubscribeInboxRequest{}, 6},
		// issue 18's leases (exchange_lease.go, exchange_stream_lease.go).
		{&historyv1.RegisterRequest{}, 3},
		{&historyv1.ReceiveResponse{}, 3},
		{&historyv1.LeaseState{}, 3},
		{&historyv1.LeasedMessage{}, 4},
		{&historyv1.LeaseRequest{}, 5},
		{&historyv1.LeaseResponse{}, 2},
		{&historyv1.AckRequest{}, 2},
		{&historyv1.NackRequest{}, 3},
		{&historyv1.NackResponse{}, 1},
		{&historyv1.ExtendLeaseRequest{}, 3},
		{&historyv1.ExtendLeaseResponse{}, 1},
	})
}

// TestExchangeCollectAllHonoursTheContext (review finding M3): CollectAll stops before the next
// owner once the call's context is done, and the owners it did not reach keep their outboxes. The
// handler is called directly with a context already cancelled, as when the client gives up.
func TestExchangeCollectAllHonoursTheContext(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerA, ownerB)
	f.send(t, ownerA, str(ownerB), `"queued"`)
	ctx, cancel := context.WithCancel(testContext(t))
	cancel()
	if resp, err := f.es.CollectAll(ctx, &historyv1.CollectAllRequest{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("CollectAll with a cancelled context = %v, %v; want context.Canceled", resp, err)
	}
	if s, _ := f.ex.Get(uuid.MustParse(ownerA)); len(s.Outbox) != 1 {
		t.Errorf("A's outbox holds %d after an abandoned CollectAll, want its message still queued", len(s.Outbox))
	}
}

// TestExchangeSendAfterClose (review finding MINOR 4): a Send that reaches an Exchange closed by
// the shutdown is UNAVAILABLE with reason SERVER_SHUTTING_DOWN, not INTERNAL, and queues nothing.
func TestExchangeSendAfterClose(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerA, ownerB)
	f.ex.Close()
	_, err := f.client.Send(testContext(t), &historyv1.SendRequest{Sender: ownerA, Recipient: str(ownerB)})
	checkStatus(t, err, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN, nil)
}

// TestExchangeListOwnersPastUnregistered (review finding MINOR 2): pages of one go on past owners
// that unregistered, to the last owner.
func TestExchangeListOwnersPastUnregistered(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerA, ownerB, ownerC, ownerD)
	ctx := testContext(t)
	for _, o := range []string{ownerB, ownerC} {
		if _, err := f.client.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: o}); err != nil {
			t.Fatal(err)
		}
	}
	got := f.listOwners(ctx, t, 1)
	if want := []string{ownerA, ownerD}; !slices.Equal(got, want) {
		t.Errorf("ListOwners pages = %v, want %v", got, want)
	}
}

// TestExchangeUnregisterTooLargeRemovesNothing (review finding B1): with the default limits, an
// owner holding 9,000 queued messages of 500 bytes (about 10 MB) is not removed by Unregister —
// which used to remove it and then fail to send the response, losing everything — but refused
// with FAILED_PRECONDITION, OWNER_HOLDS_TOO_MUCH and the sizes; the owner keeps all it held,
// drains, and then leaves with a response the client (default 4 MiB limit) reads.
func TestExchangeUnregisterTooLargeRemovesNothing(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerA, ownerB)
	a, b := uuid.MustParse(ownerA), uuid.MustParse(ownerB)
	content := jsonv.StringValue(strings.Repeat("x", 500))
	for range 9_000 {
		if _, err := f.ex.Send(exchange.SendRequest{Sender: a, Recipient: envelope.IDParticipant(b), Content: content}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := testContext(t)
	_, err := f.client.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: ownerA})
	md := errorInfoOf(err).GetMetadata()
	checkStatus(t, err, codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_OWNER_HOLDS_TOO_MUCH, md)
	size, _ := strconv.Atoi(md["responseBytes"])
	if md["ownerId"] != ownerA || size <= exchangeMaxResponseBytes || md["maxResponseBytes"] != strconv.Itoa(exchangeMaxResponseBytes) ||
		md["queuedCount"] != "9000" || md["inboxCount"] != "0" || md["deadLetterCount"] != "0" {
		t.Errorf("metadata %v, want A's id, its size over %d, 9000 queued", md, exchangeMaxResponseBytes)
	}
	if s, ok := f.ex.Get(a); !ok || len(s.Outbox) != 9_000 {
		t.Fatalf("after the refusal A is registered %v with %d queued, want all 9000", ok, len(s.Outbox))
	}

	// A drains: Collect moves its outbox to B's inbox; then it leaves with an empty flow.
	if rep := f.collect(t, ownerA); rep.GetDeliveredCount() != 9_000 {
		t.Fatalf("collect delivered %d", rep.GetDeliveredCount())
	}
	gone, err := f.client.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: ownerA})
	if err != nil || gone.GetFlow().GetOwnerId() != ownerA || len(gone.GetFlow().GetOutbox()) != 0 {
		t.Fatalf("Unregister(A) after draining = %v, %v", gone, err)
	}
	// B now holds the 9,000 in its inbox: refused too, until it pops enough.
	_, err = f.client.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: ownerB})
	checkStatus(t, err, codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_OWNER_HOLDS_TOO_MUCH, errorInfoOf(err).GetMetadata())
	for range 8_000 {
		if _, ok := f.ex.Pop(b, a); !ok {
			t.Fatal("B's inbox emptied early")
		}
	}
	left, err := f.client.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: ownerB})
	if err != nil || len(left.GetFlow().GetInboxes()) != 1 || len(left.GetFlow().GetInboxes()[0].GetMessages()) != 1_000 {
		t.Fatalf("Unregister(B) after popping = %d inboxes, %v; want the 1000 messages left", len(left.GetFlow().GetInboxes()), err)
	}
}

// TestExchangeUnregisterOmitDeadLetters (review finding B1): dead letters cannot be drained, so an
// owner whose dead letters alone exceed the limit leaves with omit_dead_letters after reading them;
// without it, it stays. The limit is lowered to reach it with a few letters.
func TestExchangeUnregisterOmitDeadLetters(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.es.maxResponse = 2_000
	f.register(t, ownerA)
	for range 10 {
		f.send(t, ownerA, str(ownerD), `"`+strings.Repeat("x", 200)+`"`) // to nobody: dead letters
	}
	f.collect(t, ownerA)
	ctx := testContext(t)
	_, err := f.client.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: ownerA})
	md := errorInfoOf(err).GetMetadata()
	checkStatus(t, err, codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_OWNER_HOLDS_TOO_MUCH, md)
	if md["deadLetterCount"] != "10" || md["maxResponseBytes"] != "2000" {
		t.Errorf("metadata %v, want 10 dead letters and the limit 2000", md)
	}
	// Issue 11: the pages come back shorter within the lowered response budget; all 10 are read.
	read, token := 0, ""
	for {
		letters, err := f.client.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: ownerA, PageToken: token})
		if err != nil || proto.Size(letters) > f.es.maxResponse {
			t.Fatalf("ListDeadLetters = %d bytes, %v", proto.Size(letters), err)
		}
		read += len(letters.GetDeadLetters())
		if token = letters.GetNextPageToken(); token == "" {
			break
		}
	}
	if read != 10 {
		t.Fatalf("ListDeadLetters read %d letters, want 10", read)
	}
	gone, err := f.client.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: ownerA, OmitDeadLetters: true})
	if err != nil || gone.GetFlow().GetOwnerId() != ownerA || len(gone.GetFlow().GetDeadLetters()) != 0 {
		t.Fatalf("Unregister(omit_dead_letters) = %v, %v", gone, err)
	}
	if proto.Size(gone) > f.es.maxResponse {
		t.Errorf("response of %d bytes, over the limit %d", proto.Size(gone), f.es.maxResponse)
	}
}

// TestExchangeCollectReportBounded (review finding M3): 2,000 broadcasts to 100 owners, with the
// default limits. The default report (counts and drops) is small and complete; with the reached
// owners' ids (7.6 MB, which used to come back as RESOURCE_EXHAUSTED after the collect had
// happened) it is cut at 4 MiB, flagged, and still read by a client with the default receive
// limit, with complete counts.
func TestExchangeCollectReportBounded(t *testing.T) {
	f := newExchangeFixture(t, nil)
	owners := make([]string, 101)
	for i := range owners {
		owners[i] = uuid.NewString()
	}
	f.register(t, owners...)
	a := uuid.MustParse(owners[0])
	const n = 2_000
	broadcastAll := func() {
		t.Helper()
		for range n {
			if _, err := f.ex.Send(exchange.SendRequest{Sender: a, Recipient: envelope.None()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx := testContext(t)

	broadcastAll()
	small, err := f.client.Collect(ctx, &historyv1.CollectRequest{OwnerId: owners[0]})
	if err != nil {
		t.Fatalf("Collect: %v", err)
	}
	if small.GetDeliveredCount() != n || small.GetCollectedCount() != n || len(small.GetDeliveries()) != n || small.GetReportTruncated() {
		t.Fatalf("default report: %d delivered, %d collected, %d entries, truncated %v; want %d complete",
			small.GetDeliveredCount(), small.GetCollectedCount(), len(small.GetDeliveries()), small.GetReportTruncated(), n)
	}
	if d := small.GetDeliveries()[n-1]; d.GetReachedCount() != 100 || len(d.GetReachedOwnerIds()) != 0 {
		t.Errorf("last delivery reached %d owners with ids %d, want 100 and no ids", d.GetReachedCount(), len(d.GetReachedOwnerIds()))
	}
	t.Logf("default report of %d broadcasts to 100 owners: %d bytes", n, proto.Size(small))

	broadcastAll()
	big, err := f.client.Collect(ctx, &historyv1.CollectRequest{OwnerId: owners[0], IncludeReachedOwnerIds: true})
	if err != nil {
		t.Fatalf("Collect with ids: %v", err)
	}
	if size := proto.Size(big); size > exchangeMaxResponseBytes {
		t.Errorf("report of %d bytes, over the limit", size)
	}
	kept := len(big.GetDeliveries())
	if !big.GetReportTruncated() || kept == 0 || kept >= n || big.GetDeliveredCount() != n || big.GetCollectedCount() != n {
		t.Fatalf("report with ids: %d of %d entries, truncated %v, %d delivered; want a truncated prefix and complete counts",
			kept, big.GetCollectedCount(), big.GetReportTruncated(), big.GetDeliveredCount())
	}
	if ids := big.GetDeliveries()[kept-1].GetReachedOwnerIds(); !slices.Equal(ids, owners[1:]) {
		t.Errorf("last kept entry reached %d owners, want the 100 others in registration order", len(ids))
	}
	inbox, err := f.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: owners[100], Sender: proto.String(owners[0]), PageSize: 1})
	if err != nil || len(inbox.GetMessages()) != 1 || inbox.GetNextPageToken() == "" {
		t.Errorf("the last owner's inbox from A: %v, %v; want the broadcasts", inbox, err)
	}
	if s, _ := f.ex.Get(uuid.MustParse(owners[100])); len(s.Inboxes) != 1 || len(s.Inboxes[0].Messages) != 2*n {
		t.Errorf("the last owner holds %d messages from A, want %d: every broadcast was delivered", len(s.Inboxes[0].Messages), 2*n)
	}
}

// TestExchangeCollectAllReportBounded (review finding M3): CollectAll's report keeps every owner's
// counts first and then deliveries in order while they fit; past the limit it is flagged, never
// larger. The limit is lowered to reach it with a few messages.
func TestExchangeCollectAllReportBounded(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerA, ownerB, ownerC)
	for _, o := range []string{ownerA, ownerB, ownerC} {
		for range 20 {
			f.send(t, o, str(ownerD), `"to nobody"`) // each a drop, reported with its recipient
		}
	}
	f.es.maxResponse = 1_500
	ctx := testContext(t)
	all, err := f.client.CollectAll(ctx, &historyv1.CollectAllRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if size := proto.Size(all); size > f.es.maxResponse {
		t.Errorf("report of %d bytes, over the limit %d", size, f.es.maxResponse)
	}
	if !all.GetReportTruncated() || len(all.GetCollects()) != 3 {
		t.Fatalf("report %d owners, truncated %v; want all 3 owners' counts and a truncated report", len(all.GetCollects()), all.GetReportTruncated())
	}
	for i, oc := range all.GetCollects() {
		if oc.GetCollectedCount() != 20 || oc.GetDropCount() != 20 {
			t.Errorf("owner %d: %d collected, %d drops; want 20 and 20", i, oc.GetCollectedCount(), oc.GetDropCount())
		}
	}
	first, rest := all.GetCollects()[0], all.GetCollects()[1:]
	if len(first.GetDeliveries()) == 0 || len(first.GetDeliveries()) == 20 && len(rest[0].GetDeliveries()) == 20 {
		t.Errorf("deliveries kept: %d, %d, %d; want a prefix cut by the limit", len(first.GetDeliveries()),
			len(rest[0].GetDeliveries()), len(rest[1].GetDeliveries()))
	}
	if len(rest[1].GetDeliveries()) != 0 {
		t.Errorf("the last owner has %d deliveries after an earlier one was cut", len(rest[1].GetDeliveries()))
	}

	// Too small even for the owners' counts: the entries that fit, flagged.
	for _, o := range []string{ownerA, ownerB, ownerC} {
		f.send(t, o, str(ownerD), `"again"`)
	}
	f.es.maxResponse = 150
	tiny, err := f.client.CollectAll(ctx, &historyv1.CollectAllRequest{})
	if err != nil || !tiny.GetReportTruncated() || len(tiny.GetCollects()) >= 3 || tiny.GetDeliveredCount() != 0 || proto.Size(tiny) > 150 {
		t.Errorf("tiny report %v, %v; want fewer than 3 owners, flagged, within 150 bytes", tiny, err)
	}
}
