package exchange

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// TestRegisterErrors: duplicate registration fails with LionAGI's text; unregistering an unknown
// owner answers false (ADR-0006 D5; vector "unknown recipients, self-send, errors").
func TestRegisterErrors(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA})
	_, err := x.Register(ownerA)
	if !errors.Is(err, ErrOwnerAlreadyRegistered) {
		t.Fatalf("second Register = %v, want ErrOwnerAlreadyRegistered", err)
	}
	var oe *OwnerError
	if !errors.As(err, &oe) || oe.Owner != ownerA || oe.ErrorMetadata()["ownerId"] != ownerA.String() {
		t.Errorf("error %v does not name owner %s", err, ownerA)
	}
	if got, want := err.Error(), "Owner "+ownerA.String()+" already registered"; got != want {
		t.Errorf("text %q, want LionAGI's %q", got, want)
	}
	if s, ok := x.Unregister(ownerB); ok || s != nil {
		t.Errorf("Unregister(unknown) = %v, %v; want nil, false", s, ok)
	}
}

// TestUnregisterReturnsWhatTheOwnerHeld: Unregister returns the queued outbox, the inboxes and the
// dead letters (docs/design.md#exchange: nothing is lost by leaving), and the owner can register again
// with an empty flow.
func TestUnregisterReturnsWhatTheOwnerHeld(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB})
	in := mustSend(t, x, ownerA, to(ownerB), "to B")
	mustCollect(t, x, ownerA)
	lost := mustSend(t, x, ownerB, to(ownerD), "to nobody")
	mustCollect(t, x, ownerB)
	queued := mustSend(t, x, ownerB, to(ownerA), "queued")

	s, ok := x.Unregister(ownerB)
	if !ok {
		t.Fatal("Unregister(B) = false")
	}
	if len(s.Outbox) != 1 || s.Outbox[0] != queued {
		t.Errorf("outbox %v, want [queued]", contents(s.Outbox))
	}
	if len(s.Inboxes) != 1 || s.Inboxes[0].Sender != ownerA || !slices.Equal(s.Inboxes[0].Messages, []*envelope.Message{in}) {
		t.Errorf("inboxes %+v, want A's inbox with the delivered message", s.Inboxes)
	}
	if len(s.DeadLetters) != 1 || s.DeadLetters[0].Message != lost || s.DeadLetters[0].Reason != ReasonUnknownRecipient {
		t.Errorf("dead letters %+v, want the message to an unknown owner", s.DeadLetters)
	}
	if x.Has(ownerB) || x.Len() != 1 {
		t.Errorf("after Unregister: Has(B) = %v, Len = %d", x.Has(ownerB), x.Len())
	}
	if _, err := x.Register(ownerB); err != nil {
		t.Fatalf("Register(B) again: %v", err)
	}
	if g, _ := x.Get(ownerB); len(g.Outbox) != 0 || len(g.Inboxes) != 0 || len(g.DeadLetters) != 0 {
		t.Errorf("re-registered flow holds %+v, want nothing", g)
	}
}

// TestOwnersPages: Owners lists registered owners in registration order, page by page, with counts;
// an unregistered owner disappears and a re-registered one moves to the end.
func TestOwnersPages(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerC, ownerA, ownerB, ownerD})
	mustSend(t, x, ownerA, to(ownerB), "queued")
	mustSend(t, x, ownerC, to(ownerB), "delivered")
	mustCollect(t, x, ownerC)

	var got []OwnerInfo
	var after uint64
	for pages := 0; ; pages++ {
		page := x.Owners(after, 3)
		got = append(got, page.Owners...)
		if !page.More {
			if pages != 1 {
				t.Errorf("%d pages of 3 for 4 owners, want 2", pages+1)
			}
			break
		}
		after = page.Next
	}
	var ids []uuid.UUID
	for _, o := range got {
		ids = append(ids, o.ID)
	}
	if want := []uuid.UUID{ownerC, ownerA, ownerB, ownerD}; !slices.Equal(ids, want) {
		t.Errorf("owners %v, want registration order %v", ids, want)
	}
	if got[1].Queued != 1 || got[2].Inbox != 1 {
		t.Errorf("counts A=%+v B=%+v, want A 1 queued, B 1 in its inbox", got[1], got[2])
	}

	x.Unregister(ownerA)
	if _, err := x.Register(ownerA); err != nil {
		t.Fatal(err)
	}
	if ids, want := x.OwnerIDs(), []uuid.UUID{ownerC, ownerB, ownerD, ownerA}; !slices.Equal(ids, want) {
		t.Errorf("after re-registering A: %v, want %v", ids, want)
	}
}

// TestSnapshotCostsOneCopy (review finding MINOR 5): Get copies the held messages once; it no
// longer also builds every progression's id list and sorts all the held entries into LionAGI's
// items order, under the owner's lock, which the wire never carried.
func TestSnapshotCostsOneCopy(t *testing.T) {
	const n = 10_000
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithMaxOutbox(0))
	for range n {
		mustSend(t, x, ownerB, to(ownerA), "in")
	}
	mustCollect(t, x, ownerB)
	for range n {
		mustSend(t, x, ownerA, to(ownerB), "out")
	}
	perGet := bytesPerOp(20, func(int) { x.Get(ownerA) })
	// One pointer per message (8 bytes each), twice for slack; the old views cost over 100 bytes
	// per message.
	if limit := 2 * 8 * 2 * float64(n); perGet > limit {
		t.Errorf("Get of %d messages allocates %.0f bytes, want at most %.0f", 2*n, perGet, limit)
	}
}
