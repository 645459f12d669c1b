package exchangetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// testReceiveOrderAndPages: receive is non-destructive, inbox creation order then FIFO, optionally
// one sender's inbox (ADR-0006 D5); pages continue from the cursor, each message has its cursor,
// and a page boundary skips nothing even when messages are popped in between.
func testReceiveOrderAndPages(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB, ownerC)
	x.send(ownerB, to(ownerC), "b1") // B's inbox on C is created first
	x.send(ownerB, to(ownerC), "b2")
	x.collect(ownerB)
	x.send(ownerA, to(ownerC), "a1")
	x.send(ownerA, to(ownerC), "a2")
	x.collect(ownerA)
	x.send(ownerB, to(ownerC), "b3")
	x.collect(ownerB)

	want := []string{"b1", "b2", "b3", "a1", "a2"}
	if got := contents(x.receive(ownerC, nil)); !slices.Equal(got, want) {
		t.Errorf("Receive = %v, want %v", got, want)
	}
	if got := contents(x.receive(ownerC, nil)); !slices.Equal(got, want) {
		t.Errorf("second Receive = %v, want %v (Receive removes nothing)", got, want)
	}
	if got, want := contents(x.receive(ownerC, &ownerA)), []string{"a1", "a2"}; !slices.Equal(got, want) {
		t.Errorf("Receive(sender A) = %v, want %v", got, want)
	}
	if got := x.receive(ownerC, &ownerD); len(got) != 0 {
		t.Errorf("Receive(sender with no inbox) = %v", contents(got))
	}
	if got := x.receive(ownerD, nil); len(got) != 0 {
		t.Errorf("Receive(unknown owner) = %v, want empty", contents(got))
	}

	var got []string
	var cur exchange.Cursor
	for pages := 0; pages < 10; pages++ {
		p, err := x.svc.ReceivePage(ctx(t), ownerC, nil, cur, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Cursors) != len(p.Messages) || (len(p.Cursors) > 0 && p.Cursors[len(p.Cursors)-1] != p.Next) {
			t.Fatalf("page of %d messages has cursors %v, next %v", len(p.Messages), p.Cursors, p.Next)
		}
		got = append(got, contents(p.Messages)...)
		if pages == 0 {
			x.pop(ownerC, ownerB) // b1, already returned
		}
		if !p.More {
			break
		}
		cur = p.Next
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages = %v, want %v", got, want)
	}

	// Resuming after a message's own cursor (a caller that returned only a prefix) continues
	// right after it; with a sender, only that inbox is paged.
	p, err := x.svc.ReceivePage(ctx(t), ownerC, nil, exchange.Cursor{}, 0)
	if err != nil || len(p.Messages) != 4 {
		t.Fatalf("ReceivePage = %v, %v; want b2 b3 a1 a2", contents(p.Messages), err)
	}
	rest, err := x.svc.ReceivePage(ctx(t), ownerC, nil, p.Cursors[1], 0)
	if err != nil || !slices.Equal(contents(rest.Messages), []string{"a1", "a2"}) || rest.More {
		t.Errorf("after the cursor of b3: %v, %v; want a1 a2", contents(rest.Messages), err)
	}
	first, err := x.svc.ReceivePage(ctx(t), ownerC, &ownerA, exchange.Cursor{}, 1)
	if err != nil || !slices.Equal(contents(first.Messages), []string{"a1"}) || !first.More {
		t.Fatalf("first page of A's inbox = %v, more %v, %v", contents(first.Messages), first.More, err)
	}
	second, err := x.svc.ReceivePage(ctx(t), ownerC, &ownerA, first.Next, 1)
	if err != nil || !slices.Equal(contents(second.Messages), []string{"a2"}) || second.More {
		t.Errorf("second page of A's inbox = %v, more %v, %v", contents(second.Messages), second.More, err)
	}
}

// testPop: pop_message removes the oldest message of one sender's inbox and answers false for an
// empty or missing inbox and an unknown owner (ADR-0006 D5; vector "direct send/collect/receive/pop").
// The empty inbox of a registered sender stays (LionAGI keeps the progression).
func testPop(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB)
	m1 := x.send(ownerA, to(ownerB), "m1")
	m2 := x.send(ownerA, to(ownerB), "m2")
	x.collect(ownerA)
	for _, want := range []*envelope.Message{m1, m2} {
		m, ok := x.pop(ownerB, ownerA)
		if !ok || !same(m, want) {
			t.Fatalf("Pop = %v, %v; want %s", m, ok, content(want))
		}
	}
	for name, args := range map[string][2]uuid.UUID{
		"empty inbox": {ownerB, ownerA}, "missing inbox": {ownerB, ownerC}, "unknown owner": {ownerC, ownerA},
	} {
		if m, ok := x.pop(args[0], args[1]); ok || m != nil {
			t.Errorf("%s: Pop = %v, %v; want nothing", name, m, ok)
		}
	}
	if s := x.get(ownerB); len(s.Inboxes) != 1 || s.Inboxes[0].Sender != ownerA || len(s.Inboxes[0].Messages) != 0 {
		t.Errorf("after popping everything: %+v, want the empty inbox of A (registered) kept", s)
	}
}

// testPopIfCheckError (issue 11: a destructive read never loses what it could not deliver): an
// error from PopIf's check is returned as it is and the message stays at the head of its inbox;
// check sees the message it would pop; with nothing to pop check is not called.
func testPopIfCheckError(t *testing.T, f Factory, _ Capabilities) {
	x := newFx(t, f, Options{}, ownerA, ownerB)
	m1 := x.send(ownerA, to(ownerB), "m1")
	m2 := x.send(ownerA, to(ownerB), "m2")
	x.collect(ownerA)
	errTooBig := errors.New("too big")
	var seen *envelope.Message
	m, ok, err := x.svc.PopIf(ctx(t), ownerB, ownerA, func(m *envelope.Message) error { seen = m; return errTooBig })
	if !errors.Is(err, errTooBig) || ok || m != nil {
		t.Fatalf("refused PopIf = %v, %v, %v; want nil, false, the check's error", m, ok, err)
	}
	if !same(seen, m1) {
		t.Errorf("check saw %v, want m1", seen)
	}
	if got := x.receive(ownerB, nil); !sameAll(got, []*envelope.Message{m1, m2}) {
		t.Errorf("after the refusal B holds %v, want m1 m2", contents(got))
	}
	m, ok, err = x.svc.PopIf(ctx(t), ownerB, ownerA, func(m *envelope.Message) error { return nil })
	if err != nil || !ok || !same(m, m1) {
		t.Errorf("accepted PopIf = %v, %v, %v; want m1", m, ok, err)
	}
	x.pop(ownerB, ownerA)
	m, ok, err = x.svc.PopIf(ctx(t), ownerB, ownerA, func(*envelope.Message) error { t.Error("check called with nothing to pop"); return nil })
	if m != nil || ok || err != nil {
		t.Errorf("PopIf of an empty inbox = %v, %v, %v", m, ok, err)
	}
}
