package exchangetest

import (
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
)

// testSendRequestID: a repeated request id returns the first message and queues nothing, even if
// the payload differs; ids are per sender; only successes are remembered; the memory ends after the
// TTL or past the last N requests (docs/design.md#branches, the idempotency rule; AIP-155; issue 17:
// "Send's request-id records live in the database too, with the window the proto promises").
func testSendRequestID(t *testing.T, f Factory, _ Capabilities) {
	clock := NewClock(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	x := newFx(t, f, Options{Clock: clock.Now, RequestTTL: time.Minute, RequestCount: 2, MaxOutbox: 3}, ownerA, ownerB)
	send := func(from uuid.UUID, id, content string) (*envelope.Message, error) {
		return x.svc.Send(ctx(t), exchange.SendRequest{Sender: from, Recipient: to(ownerB), Content: text(content), RequestID: id})
	}
	mustSend := func(from uuid.UUID, id, content string) *envelope.Message {
		t.Helper()
		m, err := send(from, id, content)
		if err != nil {
			t.Fatalf("Send(%s, %q): %v", from, id, err)
		}
		return m
	}
	queued := func(o uuid.UUID) int { return len(x.get(o).Outbox) }

	first := mustSend(ownerA, "r1", "one")
	again := mustSend(ownerA, "r1", "a different payload")
	if !same(again, first) || queued(ownerA) != 1 {
		t.Fatalf("repeat = %v with %d queued; want the first message and 1 queued", again, queued(ownerA))
	}
	if other := mustSend(ownerB, "r1", "B's own r1"); other.ID == first.ID {
		t.Error("request ids are shared between senders")
	}

	// A failed send is not remembered: the retry with the same id may succeed.
	x.send(ownerA, to(ownerB), "fill")
	x.send(ownerA, to(ownerB), "fill")
	if _, err := send(ownerA, "r2", "outbox full"); !errors.Is(err, exchange.ErrOutboxFull) {
		t.Fatalf("send into a full outbox = %v", err)
	}
	x.collect(ownerA)
	r2 := mustSend(ownerA, "r2", "retried")
	if content(r2) != "retried" {
		t.Errorf("retry after a failure = %q, want a new message", content(r2))
	}
	// A repeat of a message already delivered still answers its id (the content may be rebuilt or
	// read back; either way it is the first message's).
	x.collect(ownerA)
	if m := mustSend(ownerA, "r2", "retried"); m.ID != r2.ID || queued(ownerA) != 0 {
		t.Errorf("repeat after collect = %v with %d queued; want r2's message and nothing queued", m.ID, queued(ownerA))
	}

	// Bounded by count: r3 pushes r1 out of a memory of 2.
	mustSend(ownerA, "r3", "three")
	if m := mustSend(ownerA, "r1", "one again"); m.ID == first.ID || content(m) != "one again" {
		t.Error("r1 still remembered past the last 2 requests")
	}
	x.collect(ownerA)
	// Bounded by time: after the TTL, r2 is forgotten (r1's new record is too).
	clock.Add(time.Minute + time.Second)
	if m := mustSend(ownerA, "r3", "three again"); m.ID == r2.ID || content(m) != "three again" {
		t.Error("r3 still remembered after the TTL")
	}
	if _, ok, err := x.svc.Remembered(ctx(t), ownerA, "r2", nil); ok || err != nil {
		t.Errorf("Remembered(r2) after the TTL = %v, %v; want false", ok, err)
	}
}

// testSendRequestIDBeforeRegistration: the repeat check comes before any other check
// (docs/design.md#branches, the idempotency rule), so a repeat answers the first message even after
// the sender left; a sender that was never registered fails and leaves no memory.
func testSendRequestIDBeforeRegistration(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA)
	first, err := x.svc.Send(ctx(t), exchange.SendRequest{Sender: ownerA, Recipient: to(ownerB), Content: text("first"), RequestID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	x.unregister(ownerA)
	again, err := x.svc.Send(ctx(t), exchange.SendRequest{Sender: ownerA, Recipient: to(ownerB), Content: text("first"), RequestID: "r"})
	if err != nil || again == nil || again.ID != first.ID {
		t.Errorf("repeat after unregister = %v, %v; want the first message", again, err)
	}
	if _, err := x.svc.Send(ctx(t), exchange.SendRequest{Sender: ownerC, Recipient: to(ownerB), RequestID: "r"}); !errors.Is(err, exchange.ErrOwnerNotRegistered) {
		t.Errorf("never-registered sender = %v, want ErrOwnerNotRegistered", err)
	}
	if _, ok, err := x.svc.Remembered(ctx(t), ownerC, "r", nil); ok || err != nil {
		t.Errorf("Remembered for a sender that never sent = %v, %v", ok, err)
	}
}

// testRememberedBeforeValidation: Remembered answers a repeat before anything else is checked
// (docs/design.md#branches, the idempotency rule), given the request as far as the caller could
// read it, or nil, or one that would not validate. Memory rebuilds or trims the answer when the
// message is no longer held (exchange.Remembered) where a database engine may return the full
// first message, so only its identity and routing are compared.
func testRememberedBeforeValidation(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB)
	req := exchange.SendRequest{Sender: ownerA, Recipient: to(ownerB), Content: text("first"), RequestID: "r"}
	first, err := x.svc.Send(ctx(t), req)
	if err != nil {
		t.Fatal(err)
	}
	bad, _ := jsonv.ParseString(`{"metadata":{"lion_class":"os.system"}}`)
	invalid := exchange.SendRequest{Sender: ownerA, Recipient: envelope.ParseParticipant("bob"), Content: bad, RequestID: "r"}
	check := func(step string) {
		t.Helper()
		for name, r := range map[string]*exchange.SendRequest{"nil": nil, "same": &req, "invalid": &invalid} {
			m, ok, err := x.svc.Remembered(ctx(t), ownerA, "r", r)
			if err != nil || !ok || m == nil || m.ID != first.ID || !m.Sender.Equal(first.Sender) || !m.Recipient.Equal(first.Recipient) {
				t.Errorf("%s, request %s: Remembered = %v, %v, %v; want the first message", step, name, m, ok, err)
			}
		}
	}
	check("queued")
	x.collect(ownerA)
	x.pop(ownerB, ownerA)
	check("popped")
	x.unregister(ownerA)
	check("sender left")
	for _, id := range []string{"", "other"} {
		if m, ok, err := x.svc.Remembered(ctx(t), ownerA, id, &req); ok || m != nil || err != nil {
			t.Errorf("Remembered(%q) = %v, %v, %v; want nothing", id, m, ok, err)
		}
	}
	if m, ok, err := x.svc.Remembered(ctx(t), ownerB, "r", nil); ok || m != nil || err != nil {
		t.Errorf("Remembered of another sender = %v, %v, %v; want nothing (per sender)", m, ok, err)
	}
}
