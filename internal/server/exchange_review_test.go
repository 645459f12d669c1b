package server

import (
	"errors"
	"runtime"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
)

// TestExchangeUnregisterRefusesWithoutBuildingTheFlow (review of issue 11, finding 1: Unregister
// built every message of the flow, rendered, before measuring it): an owner holding 200 queued
// messages of 20 KB (a flow of about 8 MB with renderings) against a 50 KB budget is refused with
// OWNER_HOLDS_TOO_MUCH after allocating well under the flow's size: the flow is measured entry by
// entry and the conversion stops at the first entry past the budget.
func TestExchangeUnregisterRefusesWithoutBuildingTheFlow(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.es.maxResponse = 50_000
	f.register(t, ownerA, ownerB)
	a, b := uuid.MustParse(ownerA), uuid.MustParse(ownerB)
	content := jsonv.StringValue(strings.Repeat("x", 20_000))
	for range 200 {
		if _, err := f.ex.Send(exchange.SendRequest{Sender: a, Recipient: envelope.IDParticipant(b), Content: content}); err != nil {
			t.Fatal(err)
		}
	}
	const naive = 200 * 20_000 // the contents alone, without their renderings
	ctx := testContext(t)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := f.es.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: ownerA})
	runtime.ReadMemStats(&after)
	e, ok := errors.AsType[*ownerHoldsTooMuchError](err)
	if !ok {
		t.Fatalf("Unregister = %v, want ownerHoldsTooMuchError", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > naive/8 {
		t.Errorf("the refused Unregister allocated %d bytes, want well under the flow's %d", alloc, naive)
	}
	if md := e.ErrorMetadata(); md["queuedCount"] != "200" || md["maxResponseBytes"] != "50000" {
		t.Errorf("metadata %v, want queuedCount 200, maxResponseBytes 50000", md)
	}
	// Nothing was removed: the owner still holds all 200 and leaves once drained.
	if got := f.collect(t, ownerA).GetCollectedCount(); got != 200 {
		t.Errorf("collected %d after the refusal, want 200", got)
	}
}

// TestExchangeReadsUseTheConfiguredRenderCap (review of issue 11, finding 1; ADR-0008: the
// Exchange's reads render under --max-rendered-bytes): with a render cap of 100 bytes,
// ListDeadLetters and Unregister give a dead letter's message a render_error naming the cap
// instead of its rendering, and with omit_rendered no rendering at all.
func TestExchangeReadsUseTheConfiguredRenderCap(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.es.maxRendered = 100
	f.register(t, ownerA)
	f.send(t, ownerA, str("a role"), `"`+strings.Repeat("r", 1_000)+`"`)
	f.collect(t, ownerA)
	ctx := testContext(t)

	capped := func(what string, m *historyv1.Message) {
		t.Helper()
		if r := m.GetRendered(); r == nil || !strings.Contains(r.GetRenderError(), "--max-rendered-bytes") || r.GetText() != "" {
			t.Errorf("%s: rendered = %v, want a render_error naming --max-rendered-bytes", what, r)
		}
	}
	page, err := f.client.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: ownerA})
	if err != nil || len(page.GetDeadLetters()) != 1 {
		t.Fatalf("ListDeadLetters = %v, %v; want one dead letter", page, err)
	}
	capped("ListDeadLetters", page.GetDeadLetters()[0].GetMessage())
	page, err = f.client.ListDeadLetters(ctx, &historyv1.ListDeadLettersRequest{OwnerId: ownerA, OmitRendered: true})
	if err != nil || len(page.GetDeadLetters()) != 1 || page.GetDeadLetters()[0].GetMessage().GetRendered() != nil {
		t.Fatalf("ListDeadLetters(omit_rendered) = %v, %v; want one dead letter without rendered", page, err)
	}

	got, err := f.client.Unregister(ctx, &historyv1.UnregisterRequest{OwnerId: ownerA})
	if err != nil || len(got.GetFlow().GetDeadLetters()) != 1 {
		t.Fatalf("Unregister = %v, %v; want a flow with one dead letter", got, err)
	}
	capped("Unregister", got.GetFlow().GetDeadLetters()[0].GetMessage())
}

// TestExchangeUnregisterOmitRendered (review of issue 11, finding 1): Unregister with
// omit_rendered returns the flow's messages without renderings.
func TestExchangeUnregisterOmitRendered(t *testing.T) {
	f := newExchangeFixture(t, nil)
	f.register(t, ownerA, ownerB)
	f.send(t, ownerA, str(ownerB), `"queued"`)
	got, err := f.client.Unregister(testContext(t), &historyv1.UnregisterRequest{OwnerId: ownerA, OmitRendered: true})
	if err != nil || len(got.GetFlow().GetOutbox()) != 1 || got.GetFlow().GetOutbox()[0].GetRendered() != nil {
		t.Fatalf("Unregister(omit_rendered) = %v, %v; want one queued message without rendered", got, err)
	}
}

// TestExchangeOutboxFullGivesFigures (review of issue 11, finding 3: OUTBOX_FULL carried only the
// owner): the text gives the queued count, the limit and the flag that sets it.
func TestExchangeOutboxFullGivesFigures(t *testing.T) {
	f := newExchangeFixture(t, []exchange.Option{exchange.WithMaxOutbox(2)})
	f.register(t, ownerA, ownerB)
	f.send(t, ownerA, str(ownerB), `"one"`)
	f.send(t, ownerA, str(ownerB), `"two"`)
	_, err := f.client.Send(testContext(t), &historyv1.SendRequest{Sender: ownerA, Recipient: str(ownerB)})
	checkStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_OUTBOX_FULL, map[string]string{
		"ownerId": ownerA, "queuedCount": "2", "maxOutbox": "2", "flag": "--exchange-max-outbox"})
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "2 messages queued, at most 2") || !strings.Contains(msg, "--exchange-max-outbox") {
		t.Errorf("message %q, want the figures and the flag", msg)
	}
}
