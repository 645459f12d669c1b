package exchangetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// testUnregisterReturnsHeld: Unregister returns the queued outbox, the inboxes and the dead
// letters (docs/design.md#exchange: nothing is lost by leaving), and the owner can register again
// with an empty flow.
func testUnregisterReturnsHeld(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB)
	in := x.send(ownerA, to(ownerB), "to B")
	x.collect(ownerA)
	lost := x.send(ownerB, to(ownerD), "to nobody")
	x.collect(ownerB)
	queued := x.send(ownerB, to(ownerA), "queued")

	s, ok := x.unregister(ownerB)
	if !ok {
		t.Fatal("Unregister(B) = false")
	}
	if s.Owner != ownerB || !sameAll(s.Outbox, []*envelope.Message{queued}) {
		t.Errorf("owner %s outbox %v, want B and [queued]", s.Owner, contents(s.Outbox))
	}
	if len(s.Inboxes) != 1 || s.Inboxes[0].Sender != ownerA || !sameAll(s.Inboxes[0].Messages, []*envelope.Message{in}) {
		t.Errorf("inboxes %+v, want A's inbox with the delivered message", s.Inboxes)
	}
	if len(s.DeadLetters) != 1 || !same(s.DeadLetters[0].Message, lost) || s.DeadLetters[0].Reason != exchange.ReasonUnknownRecipient {
		t.Errorf("dead letters %+v, want the message to an unknown owner", s.DeadLetters)
	}
	if _, ok, err := x.svc.Get(ctx(t), ownerB); ok || err != nil {
		t.Errorf("Get(B) after Unregister = %v, %v", ok, err)
	}
	if ids := x.ownerIDs(); !slices.Equal(ids, []uuid.UUID{ownerA}) {
		t.Errorf("owners %v, want A alone", ids)
	}
	if got := x.receive(ownerB, nil); len(got) != 0 {
		t.Errorf("Receive(B) after Unregister = %v", contents(got))
	}
	x.register(ownerB)
	if g := x.get(ownerB); len(g.Outbox) != 0 || len(g.Inboxes) != 0 || len(g.DeadLetters) != 0 || g.DeadLettersEvicted != 0 {
		t.Errorf("re-registered flow holds %+v, want nothing", g)
	}
}

// testUnregisterIfRefused (review finding B1): when the caller's check refuses what the owner
// holds, nothing is removed and nothing is lost: the owner stays registered with the same outbox,
// inboxes and dead letters, can drain them, and a later UnregisterIf that accepts returns what is
// left.
func testUnregisterIfRefused(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB)
	in := x.send(ownerB, to(ownerA), "to A")
	x.collect(ownerB)
	lost := x.send(ownerA, to(ownerD), "to nobody")
	x.collect(ownerA)
	queued := x.send(ownerA, to(ownerB), "queued")

	errTooBig := errors.New("too big")
	var seen *exchange.Snapshot
	s, ok, err := x.svc.UnregisterIf(ctx(t), ownerA, func(s *exchange.Snapshot) error { seen = s; return errTooBig })
	if !errors.Is(err, errTooBig) || ok || s != nil {
		t.Fatalf("refused UnregisterIf = %v, %v, %v; want nil, false, the check's error", s, ok, err)
	}
	if seen == nil || !sameAll(seen.Outbox, []*envelope.Message{queued}) || len(seen.Inboxes) != 1 ||
		len(seen.DeadLetters) != 1 || !same(seen.DeadLetters[0].Message, lost) {
		t.Errorf("check saw %+v, want A's outbox, inbox and dead letter", seen)
	}
	got := x.get(ownerA)
	if !sameAll(got.Outbox, []*envelope.Message{queued}) || len(got.Inboxes) != 1 ||
		!sameAll(got.Inboxes[0].Messages, []*envelope.Message{in}) || len(got.DeadLetters) != 1 {
		t.Fatalf("after the refusal A holds %+v; want everything it held", got)
	}

	// Drain, then leave.
	if m, ok := x.pop(ownerA, ownerB); !ok || !same(m, in) {
		t.Fatalf("Pop = %v, %v", m, ok)
	}
	x.collect(ownerA)
	s, ok, err = x.svc.UnregisterIf(ctx(t), ownerA, func(s *exchange.Snapshot) error {
		if len(s.Outbox) != 0 {
			return errTooBig
		}
		return nil
	})
	if err != nil || !ok || len(s.Outbox) != 0 || len(s.DeadLetters) != 1 {
		t.Fatalf("accepted UnregisterIf = %+v, %v, %v; want the drained flow", s, ok, err)
	}
	if _, ok, _ := x.svc.Get(ctx(t), ownerA); ok {
		t.Error("A still registered")
	}
	if s, ok, err := x.svc.UnregisterIf(ctx(t), ownerA, func(*exchange.Snapshot) error { t.Error("check called for an unknown owner"); return nil }); s != nil || ok || err != nil {
		t.Errorf("UnregisterIf(unknown) = %v, %v, %v", s, ok, err)
	}
}

// testOwnersPages: Owners lists registered owners in registration order, page by page, with counts;
// an unregistered owner disappears and a re-registered one moves to the end.
func testOwnersPages(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerC, ownerA, ownerB, ownerD)
	x.send(ownerA, to(ownerB), "queued")
	x.send(ownerC, to(ownerB), "delivered")
	x.collect(ownerC)

	var got []exchange.OwnerInfo
	var after uint64
	for pages := 0; ; pages++ {
		page, err := x.svc.Owners(ctx(t), after, 3)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page.Owners...)
		if !page.More {
			if pages != 1 {
				t.Errorf("%d pages of 3 for 4 owners, want 2", pages+1)
			}
			break
		}
		if pages > 3 {
			t.Fatal("Owners does not end")
		}
		after = page.Next
	}
	var ids []uuid.UUID
	for i, o := range got {
		ids = append(ids, o.ID)
		if i > 0 && o.Seq <= got[i-1].Seq {
			t.Errorf("Seq %d after %d: want increasing", o.Seq, got[i-1].Seq)
		}
	}
	if want := []uuid.UUID{ownerC, ownerA, ownerB, ownerD}; !slices.Equal(ids, want) {
		t.Fatalf("owners %v, want registration order %v", ids, want)
	}
	if got[1].Queued != 1 || got[1].Inbox != 0 || got[2].Inbox != 1 || got[2].Queued != 0 {
		t.Errorf("counts A=%+v B=%+v, want A 1 queued, B 1 in its inbox", got[1], got[2])
	}
	all, err := x.svc.Owners(ctx(t), 0, 0)
	if err != nil || len(all.Owners) != 4 || all.More {
		t.Errorf("Owners(limit 0) = %d owners, more %v, %v; want all 4", len(all.Owners), all.More, err)
	}

	x.unregister(ownerA)
	x.register(ownerA)
	if ids, want := x.ownerIDs(), []uuid.UUID{ownerC, ownerB, ownerD, ownerA}; !slices.Equal(ids, want) {
		t.Errorf("after re-registering A: %v, want %v", ids, want)
	}
}

// testGet: Get returns what an owner holds (LionAGI's Exchange.get): the outbox oldest first, the
// inboxes in creation order, the dead letters; Register returns the new, empty flow.
func testGet(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB)
	s, err := x.svc.Register(ctx(t), ownerC)
	if err != nil || s.Owner != ownerC || len(s.Outbox) != 0 || len(s.Inboxes) != 0 || len(s.DeadLetters) != 0 {
		t.Fatalf("Register = %+v, %v; want C's empty flow", s, err)
	}
	fromB := x.send(ownerB, to(ownerC), "from B")
	x.collect(ownerB)
	fromA := x.send(ownerA, to(ownerC), "from A")
	x.collect(ownerA)
	lost := x.send(ownerC, envelope.ParseParticipant("bob"), "lost")
	x.collect(ownerC)
	q1 := x.send(ownerC, to(ownerA), "q1")
	q2 := x.send(ownerC, to(ownerB), "q2")
	g := x.get(ownerC)
	if g.Owner != ownerC || !sameAll(g.Outbox, []*envelope.Message{q1, q2}) {
		t.Errorf("outbox %v, want q1 q2", contents(g.Outbox))
	}
	if len(g.Inboxes) != 2 || g.Inboxes[0].Sender != ownerB || g.Inboxes[1].Sender != ownerA ||
		!sameAll(g.Inboxes[0].Messages, []*envelope.Message{fromB}) || !sameAll(g.Inboxes[1].Messages, []*envelope.Message{fromA}) {
		t.Errorf("inboxes %+v, want B's then A's", g.Inboxes)
	}
	if len(g.DeadLetters) != 1 || !same(g.DeadLetters[0].Message, lost) || g.DeadLetters[0].Reason != exchange.ReasonNotUUID {
		t.Errorf("dead letters %+v", g.DeadLetters)
	}
}
