package exchange

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// TestCollectReportAndDeadLetters: every message Collect drops is in the report and in the sender's
// dead letters with its reason and time; delivered messages name the owners they reached; the count
// is LionAGI's (unique ids delivered) (ADR-0006 D5; docs/design.md#exchange).
func TestCollectReportAndDeadLetters(t *testing.T) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC}, WithMaxInbox(1), WithClock(func() time.Time { return at }))
	mustSend(t, x, ownerA, to(ownerB), "fills B's inbox from A")
	// The outbox, in order, and what each message must become.
	cases := []struct {
		rcpt    envelope.Participant
		reached []uuid.UUID
		reason  Reason
		dropFor envelope.Participant
	}{
		{rcpt: envelope.Unset(), reason: ReasonUnsetRecipient, dropFor: envelope.Unset()},
		{rcpt: to(ownerD), reason: ReasonUnknownRecipient, dropFor: to(ownerD)},
		{rcpt: envelope.ParseParticipant("bob"), reason: ReasonNotUUID, dropFor: envelope.ParseParticipant("bob")},
		{rcpt: envelope.ParseParticipant("user"), reason: ReasonNotUUID, dropFor: envelope.RoleParticipant(envelope.RoleUser)},
		{rcpt: to(ownerB), reason: ReasonInboxFull, dropFor: to(ownerB)},
		// A broadcast reaches C and is dropped for B, whose inbox from A is full.
		{rcpt: envelope.None(), reached: []uuid.UUID{ownerC}, reason: ReasonInboxFull, dropFor: to(ownerB)},
	}
	var sent []*envelope.Message
	for i, tc := range cases {
		sent = append(sent, mustSend(t, x, ownerA, tc.rcpt, string(rune('a'+i))))
	}
	rep := mustCollect(t, x, ownerA)
	if rep.Delivered != 2 { // the first message (to B) and the broadcast (to C)
		t.Errorf("Delivered = %d, want 2", rep.Delivered)
	}
	if len(rep.Deliveries) != len(cases)+1 {
		t.Fatalf("%d deliveries, want %d", len(rep.Deliveries), len(cases)+1)
	}
	if d := rep.Deliveries[0]; !slices.Equal(d.Reached, []uuid.UUID{ownerB}) || len(d.Dropped) != 0 {
		t.Errorf("first message: %+v, want reached B", d)
	}
	page := x.DeadLetters(ownerA, 0, 0)
	if len(page.Letters) != len(cases) || page.Evicted != 0 {
		t.Fatalf("%d dead letters (%d evicted), want %d", len(page.Letters), page.Evicted, len(cases))
	}
	for i, tc := range cases {
		d := rep.Deliveries[i+1]
		if d.Message != sent[i] {
			t.Errorf("delivery %d is message %v, want outbox order", i+1, d.Message.ID)
		}
		if !slices.Equal(d.Reached, tc.reached) {
			t.Errorf("%s: reached %v, want %v", tc.reason, d.Reached, tc.reached)
		}
		if len(d.Dropped) != 1 || d.Dropped[0].Reason != tc.reason || !d.Dropped[0].Recipient.Equal(tc.dropFor) {
			t.Errorf("%s: dropped %+v, want one drop for %v", tc.reason, d.Dropped, tc.dropFor)
		}
		dl := page.Letters[i]
		if dl.Message != sent[i] || dl.Reason != tc.reason || !dl.Recipient.Equal(tc.dropFor) || !dl.At.Equal(at) || dl.Seq != uint64(i+1) {
			t.Errorf("dead letter %d = %+v, want %s for %v at %v", i, dl, tc.reason, tc.dropFor, at)
		}
	}
}

// TestCollectRecipientLeft: a message sent to a registered owner that unregisters before the
// collect is dropped with reason "recipient left" (ADR-0006 D5: a recipient that unregisters before
// delivery receives nothing; vector step "then unregister B").
func TestCollectRecipientLeft(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB})
	m := mustSend(t, x, ownerA, to(ownerB), "then unregister B")
	x.Unregister(ownerB)
	rep := mustCollect(t, x, ownerA)
	if rep.Delivered != 0 || rep.Deliveries[0].Dropped[0].Reason != ReasonRecipientLeft {
		t.Fatalf("report %+v, want the message dropped with recipient left", rep.Deliveries)
	}
	if dl := x.DeadLetters(ownerA, 0, 0).Letters; len(dl) != 1 || dl[0].Message != m {
		t.Errorf("dead letters %+v", dl)
	}
}

// TestBroadcastAlone: a broadcast with no other owner delivers nothing (vector "broadcast": 0) and
// is kept as a dead letter with reason "no recipients", so the drop is visible.
func TestBroadcastAlone(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA})
	mustSend(t, x, ownerA, envelope.None(), "solo")
	if rep := mustCollect(t, x, ownerA); rep.Delivered != 0 {
		t.Errorf("Delivered = %d, want 0", rep.Delivered)
	}
	dl := x.DeadLetters(ownerA, 0, 0).Letters
	if len(dl) != 1 || dl[0].Reason != ReasonNoRecipients || !dl[0].Recipient.IsNone() {
		t.Errorf("dead letters %+v, want one 'no recipients' for None", dl)
	}
}

// TestBroadcastSharesOneMessage: every recipient of a broadcast gets the same message (same id;
// messages are immutable values, so one shared copy is LionAGI's deep copy without the copying),
// in registration order, never the sender.
func TestBroadcastSharesOneMessage(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerC, ownerA, ownerB})
	m := mustSend(t, x, ownerA, envelope.None(), "hello all")
	rep := mustCollect(t, x, ownerA)
	if want := []uuid.UUID{ownerC, ownerB}; !slices.Equal(rep.Deliveries[0].Reached, want) {
		t.Errorf("reached %v, want %v", rep.Deliveries[0].Reached, want)
	}
	for _, o := range []uuid.UUID{ownerB, ownerC} {
		if got := x.Receive(o, nil); len(got) != 1 || got[0].ID != m.ID {
			t.Errorf("Receive(%s) = %v, want the broadcast", o, got)
		}
	}
	if got := x.Receive(ownerA, nil); len(got) != 0 {
		t.Errorf("the sender received its own broadcast: %v", contents(got))
	}
}

// TestDeadLettersBounded: past the bound the oldest dead letters are evicted and counted; pages
// continue from a letter's Seq.
func TestDeadLettersBounded(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA}, WithMaxDeadLetters(3))
	for i := range 5 {
		mustSend(t, x, ownerA, to(ownerD), string(rune('0'+i)))
	}
	mustCollect(t, x, ownerA)
	page := x.DeadLetters(ownerA, 0, 2)
	if page.Evicted != 2 || !page.More || len(page.Letters) != 2 {
		t.Fatalf("first page %+v, want 2 letters, more, 2 evicted", page)
	}
	if page.Letters[0].Seq != 3 {
		t.Errorf("oldest kept letter has Seq %d, want 3", page.Letters[0].Seq)
	}
	rest := x.DeadLetters(ownerA, page.Letters[1].Seq, 2)
	if rest.More || len(rest.Letters) != 1 || rest.Letters[0].Seq != 5 {
		t.Errorf("second page %+v, want the last letter", rest)
	}
	var got []string
	for _, dl := range append(page.Letters, rest.Letters...) {
		got = append(got, contents([]*envelope.Message{dl.Message})...)
	}
	if want := []string{"2", "3", "4"}; !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
}

// TestCollectUnregistered: collecting for an unregistered owner fails with LionAGI's text
// (ADR-0006 D5).
func TestCollectUnregistered(t *testing.T) {
	x := newRegistered(t, nil)
	_, err := x.Collect(ownerC)
	if err == nil || err.Error() != "Owner "+ownerC.String()+" not registered" {
		t.Errorf("Collect(unregistered) = %v", err)
	}
}

// TestCollectAllSkipsRemoved: collect_all visits a snapshot in registration order and skips an
// owner removed before its turn (ADR-0006 D5).
func TestCollectAllSkipsRemoved(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC})
	mustSend(t, x, ownerB, to(ownerC), "from B")
	mustSend(t, x, ownerC, to(ownerA), "from C")
	x.testHookMidCollect = func(owner uuid.UUID) {
		if owner == ownerA {
			x.Unregister(ownerB) // A is being collected; B's turn has not come
		}
	}
	all, err := x.CollectAll(context.Background(), ReportOptions{})
	if err != nil || all.Delivered != 1 || len(all.Reports) != 1 || all.Reports[0].Owner != ownerC {
		t.Errorf("CollectAll = %+v, want only C's message delivered", all)
	}
}

// TestCollectReportOptions (review finding M3): without ReportOptions.OwnerIDs a report keeps the
// number of owners each message reached, not their ids, so a broadcast's report does not grow with
// the owners; drops and counts are the same either way.
func TestCollectReportOptions(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC})
	mustSend(t, x, ownerA, envelope.None(), "to all")
	mustSend(t, x, ownerA, to(ownerD), "to nobody")
	rep, err := x.CollectWith(ownerA, ReportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Delivered != 1 || rep.Drops != 1 || len(rep.Deliveries) != 2 {
		t.Fatalf("report %+v, want 1 delivered, 1 drop, 2 messages", rep)
	}
	if d := rep.Deliveries[0]; d.ReachedCount != 2 || d.Reached != nil {
		t.Errorf("broadcast: %d reached, ids %v; want 2 and no ids", d.ReachedCount, d.Reached)
	}
	if d := rep.Deliveries[1]; d.ReachedCount != 0 || len(d.Dropped) != 1 || d.Dropped[0].Reason != ReasonUnknownRecipient {
		t.Errorf("direct to nobody: %+v", d)
	}
	mustSend(t, x, ownerA, envelope.None(), "to all, with ids")
	if d := mustCollect(t, x, ownerA).Deliveries[0]; d.ReachedCount != 2 || !slices.Equal(d.Reached, []uuid.UUID{ownerB, ownerC}) {
		t.Errorf("Collect: %d reached, ids %v; want B and C", d.ReachedCount, d.Reached)
	}
}

// TestCollectAllStopsWhenTheContextEnds (review finding M3): CollectAll checks its context before
// each owner; once it is done, the owners not reached yet keep their outboxes, and the error says
// why.
func TestCollectAllStopsWhenTheContextEnds(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC})
	mustSend(t, x, ownerA, to(ownerC), "from A")
	mustSend(t, x, ownerB, to(ownerC), "from B")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x.testHookMidCollect = func(owner uuid.UUID) {
		if owner == ownerA {
			cancel() // the client gives up while A is being collected
		}
	}
	all, err := x.CollectAll(ctx, ReportOptions{})
	x.testHookMidCollect = nil
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("CollectAll = %v, want context.Canceled", err)
	}
	if all.Delivered != 1 || len(all.Reports) != 1 || all.Reports[0].Owner != ownerA {
		t.Errorf("CollectAll collected %+v, want A only (its collect had started)", all)
	}
	if s, _ := x.Get(ownerB); len(s.Outbox) != 1 {
		t.Errorf("B's outbox holds %d, want its message still queued", len(s.Outbox))
	}
}

// TestDeadLettersAlwaysBounded (review finding MINOR 3): the dead-letter list is bounded per owner
// (docs/design.md#exchange); a bound below 1 is 1, not "no bound".
func TestDeadLettersAlwaysBounded(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA}, WithMaxDeadLetters(0))
	for range 3 {
		mustSend(t, x, ownerA, to(ownerD), "lost")
	}
	mustCollect(t, x, ownerA)
	if page := x.DeadLetters(ownerA, 0, 0); len(page.Letters) != 1 || page.Evicted != 2 {
		t.Errorf("%d dead letters kept, %d evicted; want 1 and 2", len(page.Letters), page.Evicted)
	}
}
