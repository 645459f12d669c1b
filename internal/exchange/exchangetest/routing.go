package exchangetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
)

// testRegisterErrors: duplicate registration fails with LionAGI's text and names the owner;
// unregistering an unknown owner answers false (ADR-0006 D5; vector "unknown recipients,
// self-send, errors").
func testRegisterErrors(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA)
	_, err := x.svc.Register(ctx(t), ownerA)
	if !errors.Is(err, exchange.ErrOwnerAlreadyRegistered) {
		t.Fatalf("second Register = %v, want ErrOwnerAlreadyRegistered", err)
	}
	var oe *exchange.OwnerError
	if !errors.As(err, &oe) || oe.Owner != ownerA || oe.ErrorMetadata()["ownerId"] != ownerA.String() {
		t.Errorf("error %v does not name owner %s", err, ownerA)
	}
	if got, want := err.Error(), "Owner "+ownerA.String()+" already registered"; got != want {
		t.Errorf("text %q, want LionAGI's %q", got, want)
	}
	if s, ok := x.unregister(ownerB); ok || s != nil {
		t.Errorf("Unregister(unknown) = %v, %v; want nil, false", s, ok)
	}
	if s, ok, err := x.svc.Get(ctx(t), ownerB); ok || s != nil || err != nil {
		t.Errorf("Get(unknown) = %v, %v, %v; want nil, false, nil", s, ok, err)
	}
}

// testSendBuildsBaseMessage: send creates a base Message (role unset) with the sender as a UUID,
// the recipient normalised, the content kept as given and the channel, queued in the outbox; the
// recipient need not be registered (ADR-0006 D5, D1).
func testSendBuildsBaseMessage(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA)
	ch := "ch"
	body, _ := jsonv.ParseString(`{"text":"hi","n":30.0}`)
	m, err := x.svc.Send(ctx(t), exchange.SendRequest{Sender: ownerA, Recipient: envelope.ParseParticipant(ownerB.String()), Content: body, Channel: &ch})
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
	// Read back, the message is the same in every field the wire carries (a database engine
	// stores and rebuilds it).
	if s := x.get(ownerA); len(s.Outbox) != 1 || !same(s.Outbox[0], m) || s.Outbox[0].Content.Dict().String() != `{"text":"hi","n":30.0}` {
		t.Errorf("outbox %v, want the message sent", s.Outbox)
	}
}

// testSendErrors: an unregistered sender is ErrOwnerNotRegistered with LionAGI's text; a full
// outbox is ErrOutboxFull naming the owner with its figures; content the envelope rejects wraps
// envelope.ErrInvalid; an over-long request id is ErrInvalidRequestID; none of them queues anything.
func testSendErrors(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{MaxOutbox: 1}, ownerA)
	_, err := x.svc.Send(ctx(t), exchange.SendRequest{Sender: ownerC, Recipient: to(ownerA)})
	if !errors.Is(err, exchange.ErrOwnerNotRegistered) || err.Error() != "Sender "+ownerC.String()+" not registered" {
		t.Errorf("unregistered sender: %v", err)
	}
	x.send(ownerA, to(ownerB), "first")
	_, err = x.svc.Send(ctx(t), exchange.SendRequest{Sender: ownerA, Recipient: to(ownerB)})
	var oe *exchange.OwnerError
	var full *exchange.OutboxFullError
	if !errors.Is(err, exchange.ErrOutboxFull) || !errors.As(err, &oe) || oe.Owner != ownerA ||
		!errors.As(err, &full) || full.Queued != 1 || full.Limit != 1 {
		t.Errorf("full outbox: %v, want ErrOutboxFull for A, 1 queued of 1", err)
	}
	x.collect(ownerA)
	// A serialized element whose lion_class is unknown: the envelope rejects it (ADR-0001 D4).
	bad, _ := jsonv.ParseString(`{"metadata":{"lion_class":"os.system"}}`)
	if _, err := x.svc.Send(ctx(t), exchange.SendRequest{Sender: ownerA, Content: bad}); !errors.Is(err, envelope.ErrInvalid) {
		t.Errorf("bad content: %v, want envelope.ErrInvalid", err)
	}
	long := strings.Repeat("r", exchange.MaxRequestIDLength+1)
	if _, err := x.svc.Send(ctx(t), exchange.SendRequest{Sender: ownerA, RequestID: long}); !errors.Is(err, exchange.ErrInvalidRequestID) {
		t.Errorf("long request id: %v", err)
	}
	if s := x.get(ownerA); len(s.Outbox) != 0 {
		t.Errorf("failed sends queued %v", contents(s.Outbox))
	}
}

// testCollectReportAndDeadLetters: every message Collect drops is in the report and in the
// sender's dead letters with its reason and time; delivered messages name the owners they reached;
// the count is LionAGI's (unique ids delivered) (ADR-0006 D5; docs/design.md#exchange).
func testCollectReportAndDeadLetters(t *testing.T, f Factory, _ Capabilities) {
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	x := newFx(t, f, Options{MaxInbox: 1, Clock: NewClock(at).Now}, ownerA, ownerB, ownerC)
	x.send(ownerA, to(ownerB), "fills B's inbox from A")
	// The outbox, in order, and what each message must become.
	cases := []struct {
		rcpt    envelope.Participant
		reached []uuid.UUID
		reason  exchange.Reason
		dropFor envelope.Participant
	}{
		{rcpt: envelope.Unset(), reason: exchange.ReasonUnsetRecipient, dropFor: envelope.Unset()},
		{rcpt: to(ownerD), reason: exchange.ReasonUnknownRecipient, dropFor: to(ownerD)},
		{rcpt: envelope.ParseParticipant("bob"), reason: exchange.ReasonNotUUID, dropFor: envelope.ParseParticipant("bob")},
		{rcpt: envelope.ParseParticipant("user"), reason: exchange.ReasonNotUUID, dropFor: envelope.RoleParticipant(envelope.RoleUser)},
		{rcpt: to(ownerB), reason: exchange.ReasonInboxFull, dropFor: to(ownerB)},
		// A broadcast reaches C and is dropped for B, whose inbox from A is full.
		{rcpt: envelope.None(), reached: []uuid.UUID{ownerC}, reason: exchange.ReasonInboxFull, dropFor: to(ownerB)},
	}
	var sent []*envelope.Message
	for i, tc := range cases {
		sent = append(sent, x.send(ownerA, tc.rcpt, string(rune('a'+i))))
	}
	rep := x.collect(ownerA)
	if rep.Owner != ownerA || rep.Delivered != 2 || rep.Drops != len(cases) { // the first message (to B) and the broadcast (to C)
		t.Errorf("report owner %s, Delivered %d, Drops %d; want A, 2, %d", rep.Owner, rep.Delivered, rep.Drops, len(cases))
	}
	if len(rep.Deliveries) != len(cases)+1 {
		t.Fatalf("%d deliveries, want %d", len(rep.Deliveries), len(cases)+1)
	}
	if d := rep.Deliveries[0]; !slices.Equal(d.Reached, []uuid.UUID{ownerB}) || d.ReachedCount != 1 || len(d.Dropped) != 0 {
		t.Errorf("first message: %+v, want reached B", d)
	}
	page := x.deadLetters(ownerA, 0, 0)
	if len(page.Letters) != len(cases) || page.Evicted != 0 || page.More {
		t.Fatalf("%d dead letters (%d evicted, more %v), want %d", len(page.Letters), page.Evicted, page.More, len(cases))
	}
	for i, tc := range cases {
		d := rep.Deliveries[i+1]
		if !same(d.Message, sent[i]) {
			t.Errorf("delivery %d is message %v, want outbox order", i+1, d.Message.ID)
		}
		if !slices.Equal(d.Reached, tc.reached) || d.ReachedCount != len(tc.reached) {
			t.Errorf("%s: reached %v (%d), want %v", tc.reason, d.Reached, d.ReachedCount, tc.reached)
		}
		if len(d.Dropped) != 1 || d.Dropped[0].Reason != tc.reason || !d.Dropped[0].Recipient.Equal(tc.dropFor) {
			t.Errorf("%s: dropped %+v, want one drop for %v", tc.reason, d.Dropped, tc.dropFor)
		}
		dl := page.Letters[i]
		if !same(dl.Message, sent[i]) || dl.Reason != tc.reason || !dl.Recipient.Equal(tc.dropFor) || !dl.At.Equal(at) || dl.Seq != uint64(i+1) {
			t.Errorf("dead letter %d = %+v, want %s for %v at %v, Seq %d", i, dl, tc.reason, tc.dropFor, at, i+1)
		}
	}
	if got := x.receive(ownerC, nil); len(got) != 1 || !same(got[0], sent[5]) {
		t.Errorf("C received %v, want the broadcast", contents(got))
	}
}

// testCollectRecipientLeft: a message sent to a registered owner that unregisters before the
// collect is dropped with reason "recipient left" (ADR-0006 D5: a recipient that unregisters
// before delivery receives nothing; vector step "then unregister B"); one registered at the
// collect is reached whatever happened in between (docs/decisions/0002: left vs unknown).
func testCollectRecipientLeft(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB)
	m := x.send(ownerA, to(ownerB), "then unregister B")
	x.unregister(ownerB)
	rep := x.collect(ownerA)
	if rep.Delivered != 0 || len(rep.Deliveries) != 1 || len(rep.Deliveries[0].Dropped) != 1 ||
		rep.Deliveries[0].Dropped[0].Reason != exchange.ReasonRecipientLeft {
		t.Fatalf("report %+v, want the message dropped with recipient left", rep.Deliveries)
	}
	if dl := x.deadLetters(ownerA, 0, 0).Letters; len(dl) != 1 || !same(dl[0].Message, m) || dl[0].Reason != exchange.ReasonRecipientLeft {
		t.Errorf("dead letters %+v", dl)
	}

	// What counts is registration at delivery: a recipient registered after the send, or back
	// before the collect, is reached (ADR-0006 D5: the recipient need not be registered yet).
	later := x.send(ownerA, to(ownerC), "C registers later")
	x.register(ownerC)
	back := x.send(ownerA, to(ownerC), "C leaves and comes back")
	x.unregister(ownerC)
	x.register(ownerC)
	if rep := x.collect(ownerA); rep.Delivered != 2 || rep.Drops != 0 {
		t.Errorf("report %+v, want both messages delivered to C", rep.Deliveries)
	}
	if got := x.receive(ownerC, nil); !sameAll(got, []*envelope.Message{later, back}) {
		t.Errorf("C received %v", contents(got))
	}
}

// testBroadcastAlone: a broadcast with no other owner delivers nothing (vector "broadcast": 0) and
// is kept as a dead letter with reason "no recipients", so the drop is visible.
func testBroadcastAlone(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA)
	x.send(ownerA, envelope.None(), "solo")
	if rep := x.collect(ownerA); rep.Delivered != 0 || rep.Drops != 1 {
		t.Errorf("Delivered = %d, Drops = %d; want 0 and 1", rep.Delivered, rep.Drops)
	}
	dl := x.deadLetters(ownerA, 0, 0).Letters
	if len(dl) != 1 || dl[0].Reason != exchange.ReasonNoRecipients || !dl[0].Recipient.IsNone() {
		t.Errorf("dead letters %+v, want one 'no recipients' for None", dl)
	}
}

// testBroadcastSnapshot: a broadcast reaches every other owner registered at its collect, in
// registration order, never the sender, as the same message (same id); an owner registered after
// the send but before the collect is reached, one that left is not (ADR-0006 D5: the broadcast
// snapshot is taken at collect).
func testBroadcastSnapshot(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerC, ownerA, ownerB)
	m := x.send(ownerA, envelope.None(), "hello all")
	x.register(ownerD)
	x.unregister(ownerC)
	rep := x.collect(ownerA)
	if want := []uuid.UUID{ownerB, ownerD}; len(rep.Deliveries) != 1 || !slices.Equal(rep.Deliveries[0].Reached, want) ||
		rep.Deliveries[0].ReachedCount != 2 || len(rep.Deliveries[0].Dropped) != 0 || rep.Delivered != 1 {
		t.Fatalf("report %+v, want reached %v and no drop, 1 delivered", rep.Deliveries, want)
	}
	for _, o := range []uuid.UUID{ownerB, ownerD} {
		if got := x.receive(o, nil); len(got) != 1 || !same(got[0], m) {
			t.Errorf("Receive(%s) = %v, want the broadcast", o, contents(got))
		}
	}
	if got := x.receive(ownerA, nil); len(got) != 0 {
		t.Errorf("the sender received its own broadcast: %v", contents(got))
	}
}

// testCollectUnregistered: collecting for an unregistered owner fails with LionAGI's text
// (ADR-0006 D5).
func testCollectUnregistered(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{})
	_, err := x.svc.Collect(ctx(t), ownerC, exchange.ReportOptions{})
	if !errors.Is(err, exchange.ErrOwnerNotRegistered) || err.Error() != "Owner "+ownerC.String()+" not registered" {
		t.Errorf("Collect(unregistered) = %v", err)
	}
}

// testCollectReportOptions (review finding M3): without ReportOptions.OwnerIDs a report keeps the
// number of owners each message reached, not their ids; drops and counts are the same either way.
func testCollectReportOptions(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB, ownerC)
	x.send(ownerA, envelope.None(), "to all")
	x.send(ownerA, to(ownerD), "to nobody")
	rep, err := x.svc.Collect(ctx(t), ownerA, exchange.ReportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Delivered != 1 || rep.Drops != 1 || len(rep.Deliveries) != 2 {
		t.Fatalf("report %+v, want 1 delivered, 1 drop, 2 messages", rep)
	}
	if d := rep.Deliveries[0]; d.ReachedCount != 2 || d.Reached != nil {
		t.Errorf("broadcast: %d reached, ids %v; want 2 and no ids", d.ReachedCount, d.Reached)
	}
	if d := rep.Deliveries[1]; d.ReachedCount != 0 || len(d.Dropped) != 1 || d.Dropped[0].Reason != exchange.ReasonUnknownRecipient {
		t.Errorf("direct to nobody: %+v", d)
	}
	x.send(ownerA, envelope.None(), "to all, with ids")
	if d := x.collect(ownerA).Deliveries[0]; d.ReachedCount != 2 || !slices.Equal(d.Reached, []uuid.UUID{ownerB, ownerC}) {
		t.Errorf("Collect: %d reached, ids %v; want B and C", d.ReachedCount, d.Reached)
	}
}

// testOutboxBound: Send past WithMaxOutbox is ErrOutboxFull and queues nothing; the bound is per
// owner; a collect makes room (options.go: "ten thousand uncollected sends means the owner is not
// collecting, and Send should say so").
func testOutboxBound(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{MaxOutbox: 3}, ownerA, ownerB)
	for i := range 3 {
		x.send(ownerA, to(ownerB), string(rune('0'+i)))
	}
	for range 2 {
		if _, err := x.svc.Send(ctx(t), exchange.SendRequest{Sender: ownerA, Recipient: to(ownerB)}); !errors.Is(err, exchange.ErrOutboxFull) {
			t.Fatalf("fourth Send into an outbox of 3 = %v, want ErrOutboxFull", err)
		}
	}
	// The bound is per owner: B's outbox is empty.
	x.send(ownerB, to(ownerA), "B is not bounded by A")
	if got := contents(x.get(ownerA).Outbox); !slices.Equal(got, []string{"0", "1", "2"}) {
		t.Errorf("A's outbox %v, want the 3 accepted", got)
	}
	if rep := x.collect(ownerA); rep.Delivered != 3 {
		t.Errorf("collect delivered %d, want 3", rep.Delivered)
	}
	x.send(ownerA, to(ownerB), "room again")
}

// testInboxBound: a delivery past WithMaxInbox becomes a dead letter of the sender with reason
// inbox full; the bound is per inbox (per sender at one recipient), and popping makes room.
func testInboxBound(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{MaxInbox: 2}, ownerA, ownerB, ownerC)
	for i := range 3 {
		x.send(ownerA, to(ownerC), string(rune('0'+i)))
	}
	x.send(ownerB, to(ownerC), "B's own inbox at C")
	if rep := x.collect(ownerA); rep.Delivered != 2 || rep.Drops != 1 || rep.Deliveries[2].Dropped[0].Reason != exchange.ReasonInboxFull {
		t.Fatalf("report %+v, want 2 delivered and the third dropped as inbox full", rep)
	}
	if rep := x.collect(ownerB); rep.Delivered != 1 {
		t.Errorf("B's message to C: %d delivered, want 1 (the bound is per inbox)", rep.Delivered)
	}
	if dl := x.deadLetters(ownerA, 0, 0).Letters; len(dl) != 1 || content(dl[0].Message) != "2" || !dl[0].Recipient.Equal(to(ownerC)) {
		t.Errorf("dead letters %+v, want message 2 for C", dl)
	}
	if m, ok := x.pop(ownerC, ownerA); !ok || content(m) != "0" {
		t.Fatalf("Pop = %v, %v", m, ok)
	}
	x.send(ownerA, to(ownerC), "fits after a pop")
	if rep := x.collect(ownerA); rep.Delivered != 1 {
		t.Errorf("after a pop: %d delivered, want 1", rep.Delivered)
	}
}

// testDeadLettersBounded: past the bound the oldest dead letters are evicted and counted; pages
// continue from a letter's Seq (docs/design.md#exchange: the dead-letter list is bounded per owner).
func testDeadLettersBounded(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{MaxDeadLetters: 3}, ownerA)
	for i := range 5 {
		x.send(ownerA, to(ownerD), string(rune('0'+i)))
	}
	x.collect(ownerA)
	page := x.deadLetters(ownerA, 0, 2)
	if page.Evicted != 2 || !page.More || len(page.Letters) != 2 {
		t.Fatalf("first page %+v, want 2 letters, more, 2 evicted", page)
	}
	if page.Letters[0].Seq != 3 {
		t.Errorf("oldest kept letter has Seq %d, want 3", page.Letters[0].Seq)
	}
	rest := x.deadLetters(ownerA, page.Letters[1].Seq, 2)
	if rest.More || len(rest.Letters) != 1 || rest.Letters[0].Seq != 5 || rest.Evicted != 2 {
		t.Errorf("second page %+v, want the last letter", rest)
	}
	var got []string
	for _, dl := range append(page.Letters, rest.Letters...) {
		got = append(got, content(dl.Message))
	}
	if want := []string{"2", "3", "4"}; !slices.Equal(got, want) {
		t.Errorf("kept %v, want %v", got, want)
	}
	if s := x.get(ownerA); len(s.DeadLetters) != 3 || s.DeadLettersEvicted != 2 {
		t.Errorf("Get: %d dead letters, %d evicted; want 3 and 2", len(s.DeadLetters), s.DeadLettersEvicted)
	}
	if p := x.deadLetters(ownerD, 0, 0); len(p.Letters) != 0 || p.Evicted != 0 {
		t.Errorf("DeadLetters(unregistered) = %+v, want empty", p)
	}
}

// testDeadLettersAlwaysBounded (review finding MINOR 3): the dead-letter list is bounded per owner
// (docs/design.md#exchange); a bound of 1 keeps one.
func testDeadLettersAlwaysBounded(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{MaxDeadLetters: 1}, ownerA)
	for range 3 {
		x.send(ownerA, to(ownerD), "lost")
	}
	x.collect(ownerA)
	if page := x.deadLetters(ownerA, 0, 0); len(page.Letters) != 1 || page.Evicted != 2 || page.Letters[0].Seq != 3 {
		t.Errorf("%d dead letters kept, %d evicted; want 1 (Seq 3) and 2", len(page.Letters), page.Evicted)
	}
}
