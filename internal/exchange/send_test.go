package exchange

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// TestSendBuildsBaseMessage: send creates a base Message (role unset) with the sender as a UUID,
// the recipient normalised, the content kept as given and the channel, queued in the outbox; the
// recipient need not be registered (ADR-0006 D5, D1).
func TestSendBuildsBaseMessage(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA})
	ch := "ch"
	content, _ := jsonv.ParseString(`{"text":"hi","n":30.0}`)
	m, err := x.Send(SendRequest{Sender: ownerA, Recipient: envelope.ParseParticipant(ownerB.String()), Content: content, Channel: &ch})
	if err != nil {
		t.Fatal(err)
	}
	if m.Kind() != envelope.KindGeneric || m.Role() != envelope.RoleUnset {
		t.Errorf("kind %v role %v, want the base Message", m.Kind(), m.Role())
	}
	if id, ok := m.Sender.ID(); !ok || id != ownerA {
		t.Errorf("sender %v", m.Sender)
	}
	if id, ok := m.Recipient.ID(); !ok || id != ownerB {
		t.Errorf("recipient %v, want B's UUID (UUID text is normalised)", m.Recipient)
	}
	if got := m.Content.Dict().String(); got != `{"text":"hi","n":30.0}` {
		t.Errorf("content %s, want it kept as given", got)
	}
	if m.Channel == nil || *m.Channel != "ch" {
		t.Errorf("channel %v", m.Channel)
	}
	if s, _ := x.Get(ownerA); len(s.Outbox) != 1 || s.Outbox[0] != m {
		t.Errorf("outbox %v", s.Outbox)
	}
}

// TestSendErrors: an unregistered sender is ErrOwnerNotRegistered with LionAGI's text; a full
// outbox is ErrOutboxFull; content the envelope rejects wraps envelope.ErrInvalid; an over-long
// request id is ErrInvalidRequestID.
func TestSendErrors(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA}, WithMaxOutbox(1))
	_, err := x.Send(SendRequest{Sender: ownerC, Recipient: to(ownerA)})
	if !errors.Is(err, ErrOwnerNotRegistered) || err.Error() != "Sender "+ownerC.String()+" not registered" {
		t.Errorf("unregistered sender: %v", err)
	}
	mustSend(t, x, ownerA, to(ownerB), "first")
	_, err = x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB)})
	var oe *OwnerError
	if !errors.Is(err, ErrOutboxFull) || !errors.As(err, &oe) || oe.Owner != ownerA {
		t.Errorf("full outbox: %v", err)
	}
	mustCollect(t, x, ownerA)
	// A serialized element whose lion_class is unknown: the envelope rejects it (ADR-0001 D4).
	bad, _ := jsonv.ParseString(`{"metadata":{"lion_class":"os.system"}}`)
	if _, err := x.Send(SendRequest{Sender: ownerA, Content: bad}); !errors.Is(err, envelope.ErrInvalid) {
		t.Errorf("bad content: %v, want envelope.ErrInvalid", err)
	}
	long := strings.Repeat("r", MaxRequestIDLength+1)
	if _, err := x.Send(SendRequest{Sender: ownerA, RequestID: long}); !errors.Is(err, ErrInvalidRequestID) {
		t.Errorf("long request id: %v", err)
	}
}

// TestSendRequestID: a repeated request id returns the first message and queues nothing, even if
// the payload differs; ids are per sender; only successes are remembered; the memory ends after the
// TTL or past the last N requests (docs/design.md#branches, the idempotency rule; AIP-155).
func TestSendRequestID(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithClock(clock), WithRequestMemory(time.Minute, 2), WithMaxOutbox(3))
	send := func(from uuid.UUID, id, content string) (*envelope.Message, error) {
		return x.Send(SendRequest{Sender: from, Recipient: to(ownerB), Content: text(content), RequestID: id})
	}
	queued := func(o uuid.UUID) int { s, _ := x.Get(o); return len(s.Outbox) }

	first, err := send(ownerA, "r1", "one")
	if err != nil {
		t.Fatal(err)
	}
	again, err := send(ownerA, "r1", "a different payload")
	if err != nil || again != first || queued(ownerA) != 1 {
		t.Fatalf("repeat = %v, %v with %d queued; want the first message and 1 queued", again, err, queued(ownerA))
	}
	if other, _ := send(ownerB, "r1", "B's own r1"); other == first {
		t.Error("request ids are shared between senders")
	}

	// A failed send is not remembered: the retry with the same id may succeed.
	mustSend(t, x, ownerA, to(ownerB), "fill")
	mustSend(t, x, ownerA, to(ownerB), "fill")
	if _, err := send(ownerA, "r2", "outbox full"); !errors.Is(err, ErrOutboxFull) {
		t.Fatalf("send into a full outbox = %v", err)
	}
	mustCollect(t, x, ownerA)
	r2, err := send(ownerA, "r2", "retried")
	if err != nil {
		t.Fatalf("retry after a failure: %v", err)
	}

	// Bounded by count: r3 pushes r1 out of a memory of 2.
	if _, err := send(ownerA, "r3", "three"); err != nil {
		t.Fatal(err)
	}
	if m, _ := send(ownerA, "r1", "one again"); m == first {
		t.Error("r1 still remembered past the last 2 requests")
	}
	// Bounded by time: after the TTL, r2 is forgotten.
	now = now.Add(time.Minute + time.Second)
	if m, _ := send(ownerA, "r2", "two again"); m == r2 {
		t.Error("r2 still remembered after the TTL")
	}
}

// TestSendRequestIDBeforeRegistration: the repeat check comes before any other check (
// docs/design.md#branches, the idempotency rule), so a repeat answers the first message even after the sender
// left.
func TestSendRequestIDBeforeRegistration(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA})
	first, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), RequestID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	x.Unregister(ownerA)
	again, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), RequestID: "r"})
	if err != nil || again != first {
		t.Errorf("repeat after unregister = %v, %v; want the first message", again, err)
	}
}
