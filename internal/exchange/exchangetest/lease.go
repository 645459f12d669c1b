package exchangetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// The lease cases (issue 18; internal/exchange/lease.go has the rules, docs/decisions/0020-leases.md
// their reasons). Time is a fakeClock the case moves, so no case sleeps.

// leaseFx is a case's Service on a fake clock, with A and B registered and the messages A sent to
// B collected into B's inbox.
type leaseFx struct {
	*fx
	clk *Clock
}

func newLeaseFx(t *testing.T, f Factory, opts Options, settingsB exchange.OwnerSettings, contents ...string) (*leaseFx, []*envelope.Message) {
	t.Helper()
	clk := NewClock(time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC))
	opts.Clock = clk.Now
	x := &leaseFx{fx: newFx(t, f, opts, ownerA), clk: clk}
	if _, err := x.svc.Register(ctx(t), ownerB, settingsB); err != nil {
		t.Fatalf("Register(B, %+v): %v", settingsB, err)
	}
	var sent []*envelope.Message
	for _, c := range contents {
		sent = append(sent, x.send(ownerA, to(ownerB), c))
	}
	if len(sent) > 0 {
		x.collect(ownerA)
	}
	return x, sent
}

// lease leases for B (or owner) and fails the test on error.
func (x *leaseFx) lease(req exchange.LeaseRequest) exchange.LeaseResult {
	x.t.Helper()
	if req.Owner == uuid.Nil {
		req.Owner = ownerB
	}
	r, err := x.svc.Lease(ctx(x.t), req)
	if err != nil {
		x.t.Fatalf("Lease(%+v): %v", req, err)
	}
	return r
}

// leasedMessages returns the messages of r.
func leasedMessages(r exchange.LeaseResult) []*envelope.Message {
	out := make([]*envelope.Message, len(r.Leases))
	for i, l := range r.Leases {
		out[i] = l.Message
	}
	return out
}

// ack acknowledges r at B and fails the test on error.
func (x *leaseFx) ack(r exchange.Receipt) {
	x.t.Helper()
	if err := x.svc.Ack(ctx(x.t), ownerB, r); err != nil {
		x.t.Fatalf("Ack(%+v): %v", r, err)
	}
}

// wantStale fails the test unless err is ErrLeaseStale.
func wantStale(t *testing.T, what string, err error) {
	t.Helper()
	var se *exchange.LeaseStaleError
	if !errors.Is(err, exchange.ErrLeaseStale) || !errors.As(err, &se) {
		t.Errorf("%s = %v, want a *LeaseStaleError (ErrLeaseStale)", what, err)
	}
}

// testLeaseHides: a leased message is invisible to Lease and PopMessage until its lease ends; Lease
// takes visible messages in Receive's order, up to Max, each with attempt 1, its deadline and a
// receipt; with nothing visible it takes none and says when the next message becomes visible
// (issue 18: "invisible to other Lease and Pop calls until the lease ends").
func testLeaseHides(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{}, "m1", "m2", "m3")
	t0 := x.clk.Now()
	first := x.lease(exchange.LeaseRequest{Max: 2, Visibility: 10 * time.Second})
	if !sameAll(leasedMessages(first), sent[:2]) {
		t.Fatalf("first Lease took %v, want m1 m2", contents(leasedMessages(first)))
	}
	for i, l := range first.Leases {
		if l.Receipt.Attempt != 1 || l.Receipt.Message != sent[i].ID || l.Receipt.Sender != ownerA || !l.Deadline.Equal(t0.Add(10*time.Second)) {
			t.Errorf("lease %d = receipt %+v deadline %v; want attempt 1 of %s from A, deadline t0+10s", i, l.Receipt, l.Deadline, sent[i].ID)
		}
	}
	if first.Held != 2 {
		t.Errorf("first Lease: Held %d, want 2", first.Held)
	}
	x.clk.Add(time.Second)
	second := x.lease(exchange.LeaseRequest{Max: 5}) // the owner's default visibility: 30s
	if !sameAll(leasedMessages(second), sent[2:]) || !second.Leases[0].Deadline.Equal(t0.Add(time.Second+exchange.DefaultVisibility)) {
		t.Fatalf("second Lease took %+v, want m3 alone, deadline t0+1s+%v", second.Leases, exchange.DefaultVisibility)
	}
	third := x.lease(exchange.LeaseRequest{Max: 5})
	if len(third.Leases) != 0 || third.Held != 3 || !third.NextVisible.Equal(t0.Add(10*time.Second)) {
		t.Errorf("third Lease = %d leases, Held %d, NextVisible %v; want none, 3, t0+10s", len(third.Leases), third.Held, third.NextVisible)
	}
	if m, ok := x.pop(ownerB, ownerA); ok {
		t.Errorf("PopMessage took %q while every message is leased", content(m))
	}
	p, err := x.svc.ReceivePage(ctx(t), ownerB, nil, exchange.Cursor{}, 0)
	if err != nil || !sameAll(p.Messages, sent) || len(p.Leases) != 3 {
		t.Fatalf("Receive = %v (%d lease states), %v; want m1 m2 m3, all marked", contents(p.Messages), len(p.Leases), err)
	}
	for i, li := range p.Leases {
		want := t0.Add(10 * time.Second)
		if i == 2 {
			want = t0.Add(time.Second + exchange.DefaultVisibility)
		}
		if li.Attempts != 1 || !li.Held || !li.VisibleAt.Equal(want) || !li.Hidden(x.clk.Now()) {
			t.Errorf("Receive's lease state of m%d = %+v, want attempt 1, held, visible at %v", i+1, li, want)
		}
	}
	if s := x.get(ownerB); len(s.Inboxes) != 1 || len(s.Inboxes[0].Messages) != 3 {
		t.Errorf("Get(B) = %+v, want the 3 leased messages still in A's inbox", s.Inboxes)
	}
}

// testLeasePopSkipsLeased: PopMessage never takes a leased message: it takes the oldest visible
// one behind it (issue 18), and Receive without leases shows no lease state.
func testLeasePopSkipsLeased(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{}, "m1", "m2")
	if p, err := x.svc.ReceivePage(ctx(t), ownerB, nil, exchange.Cursor{}, 0); err != nil || p.Leases != nil {
		t.Errorf("Receive before any lease: lease states %v, %v; want nil", p.Leases, err)
	}
	l := x.lease(exchange.LeaseRequest{})
	if !sameAll(leasedMessages(l), sent[:1]) {
		t.Fatalf("Lease took %v, want m1 (Max 0 means 1)", contents(leasedMessages(l)))
	}
	if m, ok := x.pop(ownerB, ownerA); !ok || !same(m, sent[1]) {
		t.Fatalf("PopMessage = %v, want m2 (m1 is leased)", m)
	}
	if m, ok := x.pop(ownerB, ownerA); ok {
		t.Errorf("second PopMessage = %q, want none", content(m))
	}
	x.ack(l.Leases[0].Receipt)
	if got := x.receive(ownerB, nil); len(got) != 0 {
		t.Errorf("after the Ack B holds %v", contents(got))
	}
}

// testLeaseAck: Ack removes the message; a second Ack of the same receipt, an Ack naming another
// attempt or a message the owner does not hold, is ErrLeaseStale and changes nothing (issue 18).
func testLeaseAck(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{}, "m1", "m2")
	l := x.lease(exchange.LeaseRequest{Max: 2})
	x.ack(l.Leases[0].Receipt)
	if got := x.receive(ownerB, nil); !sameAll(got, sent[1:]) {
		t.Errorf("after the Ack B holds %v, want m2", contents(got))
	}
	wantStale(t, "a second Ack", x.svc.Ack(ctx(t), ownerB, l.Leases[0].Receipt))
	other := l.Leases[1].Receipt
	other.Attempt = 2
	wantStale(t, "an Ack of an attempt never made", x.svc.Ack(ctx(t), ownerB, other))
	wantStale(t, "an Ack of an unknown message", x.svc.Ack(ctx(t), ownerB, exchange.Receipt{Message: uuid.New(), Sender: ownerA, Attempt: 1}))
	if got := x.receive(ownerB, nil); !sameAll(got, sent[1:]) {
		t.Errorf("the refused Acks changed B's inbox: %v", contents(got))
	}
	if err := x.svc.Ack(ctx(t), ownerC, l.Leases[1].Receipt); !errors.Is(err, exchange.ErrOwnerNotRegistered) {
		t.Errorf("Ack at an unregistered owner = %v, want ErrOwnerNotRegistered", err)
	}
	if _, err := x.svc.Lease(ctx(t), exchange.LeaseRequest{Owner: ownerC}); !errors.Is(err, exchange.ErrOwnerNotRegistered) {
		t.Errorf("Lease by an unregistered owner = %v, want ErrOwnerNotRegistered", err)
	}
}

// testLeaseExpiry: a lease whose deadline passes makes the message visible again; the next Lease
// gets it with attempt 2 and the first receipt is stale from then on; before that, a late Ack
// still works (lease.go: a receipt is stale only once its message moved on).
func testLeaseExpiry(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{}, "m1", "m2")
	l1 := x.lease(exchange.LeaseRequest{Max: 2, Visibility: 5 * time.Second})
	x.clk.Add(5 * time.Second) // the deadline itself: visible again
	late := l1.Leases[1].Receipt
	x.ack(late) // m2: no one took it since, so the late Ack holds
	p, err := x.svc.ReceivePage(ctx(t), ownerB, nil, exchange.Cursor{}, 0)
	if err != nil || !sameAll(p.Messages, sent[:1]) || len(p.Leases) != 1 || p.Leases[0].Hidden(x.clk.Now()) || p.Leases[0].Attempts != 1 {
		t.Fatalf("Receive after the deadline = %v %+v, %v; want m1, attempt 1, visible", contents(p.Messages), p.Leases, err)
	}
	l2 := x.lease(exchange.LeaseRequest{Max: 2})
	if len(l2.Leases) != 1 || !same(l2.Leases[0].Message, sent[0]) || l2.Leases[0].Receipt.Attempt != 2 {
		t.Fatalf("Lease after the deadline = %+v, want m1 with attempt 2", l2.Leases)
	}
	wantStale(t, "Ack of the expired first lease", x.svc.Ack(ctx(t), ownerB, l1.Leases[0].Receipt))
	_, err = x.svc.Nack(ctx(t), ownerB, l1.Leases[0].Receipt, 0)
	wantStale(t, "Nack of the expired first lease", err)
	_, err = x.svc.ExtendLease(ctx(t), ownerB, l1.Leases[0].Receipt, time.Minute)
	wantStale(t, "ExtendLease of the expired first lease", err)
	x.ack(l2.Leases[0].Receipt)
	if got := x.receive(ownerB, nil); len(got) != 0 {
		t.Errorf("B holds %v after both Acks", contents(got))
	}
}

// testLeaseNack: Nack makes the message visible again at once, or after its delay; its receipt is
// stale from then on; a delayed message is hidden from Lease and PopMessage until the delay ends
// (issue 18: "Nack (visible again, optionally after a delay)").
func testLeaseNack(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{}, "m1")
	l1 := x.lease(exchange.LeaseRequest{})
	if dead, err := x.svc.Nack(ctx(t), ownerB, l1.Leases[0].Receipt, 0); err != nil || dead {
		t.Fatalf("Nack = %v, %v; want visible again", dead, err)
	}
	wantStale(t, "Ack after the Nack", x.svc.Ack(ctx(t), ownerB, l1.Leases[0].Receipt))
	l2 := x.lease(exchange.LeaseRequest{})
	if len(l2.Leases) != 1 || l2.Leases[0].Receipt.Attempt != 2 {
		t.Fatalf("Lease after a Nack = %+v, want m1 with attempt 2", l2.Leases)
	}
	t0 := x.clk.Now()
	if _, err := x.svc.Nack(ctx(t), ownerB, l2.Leases[0].Receipt, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if l := x.lease(exchange.LeaseRequest{}); len(l.Leases) != 0 || !l.NextVisible.Equal(t0.Add(5*time.Second)) || l.Held != 0 {
		t.Errorf("Lease during the delay = %d leases, NextVisible %v, Held %d; want none, t0+5s, 0", len(l.Leases), l.NextVisible, l.Held)
	}
	if m, ok := x.pop(ownerB, ownerA); ok {
		t.Errorf("PopMessage took %q during the Nack's delay", content(m))
	}
	p, err := x.svc.ReceivePage(ctx(t), ownerB, nil, exchange.Cursor{}, 0)
	if err != nil || len(p.Leases) != 1 || p.Leases[0].Held || !p.Leases[0].Hidden(x.clk.Now()) || p.Leases[0].Attempts != 2 {
		t.Errorf("Receive during the delay: %+v, %v; want attempt 2, hidden, not held", p.Leases, err)
	}
	x.clk.Add(5 * time.Second)
	if m, ok := x.pop(ownerB, ownerA); !ok || !same(m, sent[0]) {
		t.Errorf("PopMessage after the delay = %v, %v; want m1", m, ok)
	}
}

// testLeaseExtend: ExtendLease sets the deadline to now + its duration, keeping the message hidden
// past the first deadline; the same receipt still acknowledges it (issue 18: ExtendLease).
func testLeaseExtend(t *testing.T, f Factory, _ Capabilities) {
	x, _ := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{}, "m1")
	l := x.lease(exchange.LeaseRequest{Visibility: 10 * time.Second})
	x.clk.Add(8 * time.Second)
	d, err := x.svc.ExtendLease(ctx(t), ownerB, l.Leases[0].Receipt, 20*time.Second)
	if err != nil || !d.Equal(x.clk.Now().Add(20*time.Second)) {
		t.Fatalf("ExtendLease = %v, %v; want now+20s", d, err)
	}
	x.clk.Add(15 * time.Second) // 23s after the lease: past the first deadline, before the new one
	if got := x.lease(exchange.LeaseRequest{}); len(got.Leases) != 0 || !got.NextVisible.Equal(d) {
		t.Errorf("Lease before the extended deadline = %+v (next %v), want none, next %v", got.Leases, got.NextVisible, d)
	}
	x.ack(l.Leases[0].Receipt)
	_, err = x.svc.ExtendLease(ctx(t), ownerB, l.Leases[0].Receipt, time.Second)
	wantStale(t, "ExtendLease after the Ack", err)
}

// testLeaseMaxAttempts: a message whose lease ends with its attempts at the owner's MaxAttempts
// becomes a dead letter of the owner that leased it, reason ReasonMaxAttempts, with its attempt
// count, whether the lease expired or was nacked; an expired one is noticed by the next call that
// reads the owner's inboxes or dead letters (issue 18; lease.go).
func testLeaseMaxAttempts(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{MaxAttempts: 2, Visibility: time.Second}, "expires", "nacked")
	before, err := x.svc.Stats(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for attempt := 1; attempt <= 2; attempt++ {
		l := x.lease(exchange.LeaseRequest{Sender: &ownerA})
		if len(l.Leases) != 1 || !same(l.Leases[0].Message, sent[0]) || l.Leases[0].Receipt.Attempt != attempt {
			t.Fatalf("lease %d = %+v, want %q with attempt %d", attempt, l.Leases, "expires", attempt)
		}
		x.clk.Add(time.Second)
	}
	// The second lease has expired: the next read of B's dead letters sees the dead letter.
	p := x.deadLetters(ownerB, 0, 0)
	if len(p.Letters) != 1 {
		t.Fatalf("B's dead letters = %+v, want the message that expired twice", p.Letters)
	}
	dl := p.Letters[0]
	if !same(dl.Message, sent[0]) || dl.Reason != exchange.ReasonMaxAttempts || dl.Attempts != 2 || !dl.Recipient.Equal(to(ownerB)) || !dl.At.Equal(x.clk.Now()) {
		t.Errorf("dead letter = %+v, want %q for B, max attempts, 2 attempts, now", dl, "expires")
	}
	if got := x.deadLetters(ownerA, 0, 0); len(got.Letters) != 0 {
		t.Errorf("the sender A has dead letters %+v; a max-attempts dead letter is the recipient's", got.Letters)
	}
	// "nacked": attempt 1 expires unnoticed, attempt 2 is nacked at the limit.
	l := x.lease(exchange.LeaseRequest{})
	x.clk.Add(time.Second)
	l = x.lease(exchange.LeaseRequest{})
	if len(l.Leases) != 1 || !same(l.Leases[0].Message, sent[1]) || l.Leases[0].Receipt.Attempt != 2 {
		t.Fatalf("second message's second lease = %+v", l.Leases)
	}
	dead, err := x.svc.Nack(ctx(t), ownerB, l.Leases[0].Receipt, time.Hour)
	if err != nil || !dead {
		t.Fatalf("Nack at max attempts = %v, %v; want dead-lettered", dead, err)
	}
	if got := x.receive(ownerB, nil); len(got) != 0 {
		t.Errorf("B's inbox holds %v after both messages reached max attempts", contents(got))
	}
	if got := x.deadLetters(ownerB, 0, 0); len(got.Letters) != 2 || got.Letters[1].Reason != exchange.ReasonMaxAttempts || got.Letters[1].Attempts != 2 {
		t.Errorf("B's dead letters = %+v, want both, max attempts", got.Letters)
	}
	// exchange.Stats.DeadLettered counts every dead letter made, these included.
	if after, err := x.svc.Stats(ctx(t)); err != nil || after.DeadLettered != before.DeadLettered+2 {
		t.Errorf("Stats.DeadLettered %d -> %d (%v), want 2 more", before.DeadLettered, after.DeadLettered, err)
	}
}

// testLeaseScope: Lease with a sender takes that sender's inbox only; without one, inboxes in
// creation order, oldest first; MaxBytes stops a batch (the first message always taken) and
// MaxHeld counts the scope's held leases (issue 18: "from one sender's inbox or from all").
func testLeaseScope(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{}, "a1", "a2")
	x.register(ownerC)
	c1 := x.send(ownerC, to(ownerB), "c1")
	c2 := x.send(ownerC, to(ownerB), "c2")
	x.collect(ownerC)
	if l := x.lease(exchange.LeaseRequest{Sender: &ownerC, Max: 1}); !sameAll(leasedMessages(l), []*envelope.Message{c1}) || l.Held != 1 || !l.More {
		t.Fatalf("Lease of C's inbox = %v (held %d, more %v), want c1, 1, more (c2 is left)", contents(leasedMessages(l)), l.Held, l.More)
	}
	if l := x.lease(exchange.LeaseRequest{Max: 5, MaxBytes: 1}); !sameAll(leasedMessages(l), sent[:1]) || !l.More {
		t.Fatalf("Lease with MaxBytes 1 = %v (more %v), want a1 alone, more (review M3: a cut by size says so)", contents(leasedMessages(l)), l.More)
	}
	// Held: a1 and c1. MaxHeld 3 leaves room for one more, in order: a2.
	if l := x.lease(exchange.LeaseRequest{Max: 10, MaxHeld: 3}); !sameAll(leasedMessages(l), sent[1:]) || l.Held != 3 {
		t.Fatalf("Lease with MaxHeld 3 = %v (held %d), want a2, 3", contents(leasedMessages(l)), l.Held)
	}
	if l := x.lease(exchange.LeaseRequest{Max: 10, MaxHeld: 3}); len(l.Leases) != 0 || l.Held != 3 || !l.More {
		t.Fatalf("Lease at MaxHeld = %v (held %d, more %v), want none, 3, more (c2 is visible)", contents(leasedMessages(l)), l.Held, l.More)
	}
	// Scoped to C, only c1 is held there.
	if l := x.lease(exchange.LeaseRequest{Sender: &ownerC, Max: 10, MaxHeld: 3}); !sameAll(leasedMessages(l), []*envelope.Message{c2}) || l.Held != 2 || l.More {
		t.Fatalf("Lease of C's inbox with MaxHeld 3 = %v (held %d, more %v), want c2, 2, no more", contents(leasedMessages(l)), l.Held, l.More)
	}
}

// testLeaseUnregister: Unregister returns leased messages with the rest of the flow and ends their
// leases: an Ack afterwards fails, also once the owner registers again (issue 18).
func testLeaseUnregister(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{}, "leased", "held")
	l := x.lease(exchange.LeaseRequest{})
	s, ok := x.unregister(ownerB)
	if !ok || len(s.Inboxes) != 1 || !sameAll(s.Inboxes[0].Messages, sent) {
		t.Fatalf("Unregister(B) = %+v, %v; want both messages returned", s, ok)
	}
	if err := x.svc.Ack(ctx(t), ownerB, l.Leases[0].Receipt); !errors.Is(err, exchange.ErrOwnerNotRegistered) {
		t.Errorf("Ack after Unregister = %v, want ErrOwnerNotRegistered", err)
	}
	x.register(ownerB)
	wantStale(t, "Ack after registering again", x.svc.Ack(ctx(t), ownerB, l.Leases[0].Receipt))
}

// testLeaseUnregisterNoticed: an Unregister that finds a last attempt's lease expired makes it a
// dead letter before it takes the snapshot (expiry is noticed, not timed), and the snapshot says
// which dead letters it made: those numbered above NoticedAfter, which a client that has read the
// owner's dead letters has not seen (an Unregister omitting dead letters still returns them).
func testLeaseUnregisterNoticed(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{MaxAttempts: 1, Visibility: time.Second}, "read before", "expires in Unregister")
	l := x.lease(exchange.LeaseRequest{Max: 1})
	if dead, err := x.svc.Nack(ctx(t), ownerB, l.Leases[0].Receipt, time.Hour); err != nil || !dead {
		t.Fatalf("Nack at max attempts = %v, %v; want dead-lettered", dead, err)
	}
	read := x.deadLetters(ownerB, 0, 0)
	if len(read.Letters) != 1 || !same(read.Letters[0].Message, sent[0]) {
		t.Fatalf("B's dead letters = %+v, want the nacked message", read.Letters)
	}
	if l := x.lease(exchange.LeaseRequest{}); len(l.Leases) != 1 || !same(l.Leases[0].Message, sent[1]) {
		t.Fatalf("lease = %+v, want the second message", l.Leases)
	}
	x.clk.Add(2 * time.Second) // its only attempt's deadline passes; nothing looks at B meanwhile
	s, ok := x.unregister(ownerB)
	if !ok || len(s.DeadLetters) != 2 {
		t.Fatalf("Unregister(B) = %+v, %v; want both dead letters", s, ok)
	}
	if s.NoticedAfter != read.Letters[0].Seq {
		t.Fatalf("Unregister(B)'s NoticedAfter = %d, want %d (the newest dead letter before it)", s.NoticedAfter, read.Letters[0].Seq)
	}
	if made := s.DeadLetters[1]; made.Seq <= s.NoticedAfter || !same(made.Message, sent[1]) || made.Reason != exchange.ReasonMaxAttempts {
		t.Fatalf("the dead letter Unregister made = %+v, NoticedAfter %d; want the expired lease, numbered above it", made, s.NoticedAfter)
	}
}

// testLeaseInboxBound: leased messages count against the inbox bound (issue 18: "inbox bounds
// count leased messages").
func testLeaseInboxBound(t *testing.T, f Factory, _ Capabilities) {
	x, _ := newLeaseFx(t, f, Options{MaxInbox: 2}, exchange.OwnerSettings{}, "m1", "m2")
	x.lease(exchange.LeaseRequest{Max: 2})
	x.send(ownerA, to(ownerB), "m3")
	rep := x.collect(ownerA)
	if rep.Drops != 1 || len(rep.Deliveries) != 1 || len(rep.Deliveries[0].Dropped) != 1 || rep.Deliveries[0].Dropped[0].Reason != exchange.ReasonInboxFull {
		t.Errorf("Collect into a full inbox of leased messages = %+v, want one drop, inbox full", rep)
	}
}

// testLeaseReclaim: the inbox of a departed sender is kept while it holds a leased message and
// reclaimed once the Ack empties it, as a Pop would (docs/design.md#exchange, reclaim).
func testLeaseReclaim(t *testing.T, f Factory, _ Capabilities) {
	x, _ := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{}, "m1")
	l := x.lease(exchange.LeaseRequest{})
	x.unregister(ownerA)
	if s := x.get(ownerB); len(s.Inboxes) != 1 {
		t.Fatalf("B's inboxes = %+v, want A's kept while it holds the leased message", s.Inboxes)
	}
	x.ack(l.Leases[0].Receipt)
	if s := x.get(ownerB); len(s.Inboxes) != 0 {
		t.Errorf("B's inboxes = %+v after the Ack emptied the departed sender's inbox, want none", s.Inboxes)
	}
}

// testLeaseRegisterSettings: Register's settings apply to that owner alone; zero fields are the
// Exchange's defaults (issue 18: "owner options set at Register").
func testLeaseRegisterSettings(t *testing.T, f Factory, _ Capabilities) {
	x, _ := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{Visibility: 3 * time.Second}, "m1")
	t0 := x.clk.Now()
	if l := x.lease(exchange.LeaseRequest{}); len(l.Leases) != 1 || !l.Leases[0].Deadline.Equal(t0.Add(3*time.Second)) {
		t.Errorf("B's lease = %+v, want its registered visibility (3s)", l.Leases)
	}
	x.register(ownerC) // defaults
	x.send(ownerA, to(ownerC), "c")
	x.collect(ownerA)
	if l := x.lease(exchange.LeaseRequest{Owner: ownerC}); len(l.Leases) != 1 || !l.Leases[0].Deadline.Equal(t0.Add(exchange.DefaultVisibility)) {
		t.Errorf("C's lease = %+v, want the default visibility", l.Leases)
	}
}

// testLeaseLedger: the ledger gains the leased and acked states (issue 18: "The crash harness's
// ledger gains the leased state"); an entry keeps its attempt count. It runs when the engine
// implements exchange.Ledgered.
func testLeaseLedger(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{MaxAttempts: 1}, "acked", "leased", "dead")
	ledgerOf(t, x.svc)
	l := x.lease(exchange.LeaseRequest{Max: 3})
	x.ack(l.Leases[0].Receipt)
	if _, err := x.svc.Nack(ctx(t), ownerB, l.Leases[2].Receipt, 0); err != nil {
		t.Fatal(err)
	}
	got := ledgerOf(t, x.svc)
	want := []struct {
		state    exchange.LedgerState
		reason   exchange.Reason
		attempts int
	}{{exchange.LedgerAcked, 0, 1}, {exchange.LedgerLeased, 0, 1}, {exchange.LedgerDead, exchange.ReasonMaxAttempts, 1}}
	for i, w := range want {
		es := got[sent[i].ID]
		if len(es) != 1 || es[0].State != w.state || es[0].Reason != w.reason || es[0].Attempts != w.attempts || es[0].Recipient != ownerB.String() {
			t.Errorf("%q's ledger = %+v, want one entry for B: %s, reason %v, %d attempts", content(sent[i]), es, w.state, w.reason, w.attempts)
		}
	}
}

// testLeaseCompeting: leasers racing on one inbox never hold the same message at once: with no
// lease expiring, every message is leased and acknowledged exactly once (issue 18: "competing
// leasers ... never hold the same message at once"; FOR UPDATE SKIP LOCKED in the database
// engines). 4 leasers, 100 messages times Capabilities.Scale.
func testLeaseCompeting(t *testing.T, f Factory, caps Capabilities) {
	n := 100 * caps.Scale
	x, _ := newLeaseFx(t, f, Options{MaxInbox: NoBound, MaxOutbox: NoBound}, exchange.OwnerSettings{Visibility: time.Hour})
	for i := range n {
		x.send(ownerA, to(ownerB), fmt.Sprint(i))
	}
	x.collect(ownerA)
	var mu sync.Mutex
	taken := map[uuid.UUID]int{}
	var errs errList
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				l, err := x.svc.Lease(ctx(t), exchange.LeaseRequest{Owner: ownerB, Max: 3})
				if err != nil {
					errs.add(err)
					return
				}
				if len(l.Leases) == 0 {
					return
				}
				for _, le := range l.Leases {
					mu.Lock()
					taken[le.Message.ID]++
					mu.Unlock()
					if err := x.svc.Ack(ctx(t), ownerB, le.Receipt); err != nil {
						errs.add(fmt.Errorf("ack: %w", err))
					}
				}
			}
		})
	}
	wg.Wait()
	errs.report(t)
	if len(taken) != n {
		t.Errorf("%d distinct messages leased, want %d", len(taken), n)
	}
	for id, k := range taken {
		if k != 1 {
			t.Errorf("message %s leased %d times", id, k)
		}
	}
	if got := x.receive(ownerB, nil); len(got) != 0 {
		t.Errorf("%d messages left after every lease was acknowledged", len(got))
	}
}

// testLeaseRelease: Release gives back a lease that was never handed out: the attempt is undone,
// the message visible at once and held by no lease, and it never becomes a dead letter, even at
// MaxAttempts (review of issue 18, M1: a response cut for its size must not burn an attempt).
func testLeaseRelease(t *testing.T, f Factory, _ Capabilities) {
	x, sent := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{MaxAttempts: 1, Visibility: time.Second}, "m1")
	l := x.lease(exchange.LeaseRequest{})
	if err := x.svc.Release(ctx(t), ownerB, l.Leases[0].Receipt); err != nil {
		t.Fatalf("Release: %v", err)
	}
	p, err := x.svc.ReceivePage(ctx(t), ownerB, nil, exchange.Cursor{}, 0)
	if err != nil || !sameAll(p.Messages, sent) || p.Leases != nil {
		t.Fatalf("Receive after the Release = %v, lease states %+v, %v; want m1, never leased", contents(p.Messages), p.Leases, err)
	}
	if got := x.deadLetters(ownerB, 0, 0); len(got.Letters) != 0 {
		t.Fatalf("Release at MaxAttempts made dead letters %+v", got.Letters)
	}
	wantStale(t, "Release of a released lease", x.svc.Release(ctx(t), ownerB, l.Leases[0].Receipt))
	l1 := x.lease(exchange.LeaseRequest{})
	if len(l1.Leases) != 1 || l1.Leases[0].Receipt.Attempt != 1 {
		t.Fatalf("Lease after the Release = %+v, want m1 with attempt 1 again", l1.Leases)
	}
	x.ack(l1.Leases[0].Receipt)

	// A second attempt released goes back to one attempt, visible, "as if never taken"
	// (docs/decisions/0020): the first lease, whose deadline had passed but which no one else had
	// taken, is held again (a lease ends by Ack, Nack or another taker, not by its deadline), so its
	// receipt still acknowledges the message. Release used to leave the row held by no lease, and
	// the first receiver's Ack was refused as stale: the message was delivered again for a
	// response that never reached anyone.
	y, _ := newLeaseFx(t, f, Options{}, exchange.OwnerSettings{MaxAttempts: 3, Visibility: time.Second}, "m2")
	first := y.lease(exchange.LeaseRequest{})
	y.clk.Add(time.Second)
	second := y.lease(exchange.LeaseRequest{})
	if len(second.Leases) != 1 || second.Leases[0].Receipt.Attempt != 2 {
		t.Fatalf("second lease = %+v, want attempt 2", second.Leases)
	}
	if err := y.svc.Release(ctx(t), ownerB, second.Leases[0].Receipt); err != nil {
		t.Fatalf("Release of attempt 2: %v", err)
	}
	q, err := y.svc.ReceivePage(ctx(t), ownerB, nil, exchange.Cursor{}, 0)
	if err != nil || len(q.Leases) != 1 || q.Leases[0].Attempts != 1 || !q.Leases[0].Held || q.Leases[0].Hidden(y.clk.Now()) {
		t.Fatalf("Receive after releasing attempt 2: %+v, %v; want 1 attempt, visible, held by the first lease again", q.Leases, err)
	}
	wantStale(t, "Release of the released attempt 2", y.svc.Release(ctx(t), ownerB, second.Leases[0].Receipt))
	y.ack(first.Leases[0].Receipt)
	if p, err := y.svc.ReceivePage(ctx(t), ownerB, nil, exchange.Cursor{}, 0); err != nil || len(p.Messages) != 0 {
		t.Fatalf("Receive after the first lease's Ack = %v, %v; want nothing", contents(p.Messages), err)
	}

	// A first lease that was nacked is not held: releasing the attempt after it leaves the row
	// held by no lease, and the nacked receipt stays stale.
	y, _ = newLeaseFx(t, f, Options{}, exchange.OwnerSettings{MaxAttempts: 3, Visibility: time.Second}, "m3")
	first = y.lease(exchange.LeaseRequest{})
	if dead, err := y.svc.Nack(ctx(t), ownerB, first.Leases[0].Receipt, 0); err != nil || dead {
		t.Fatalf("Nack = %v, %v; want the message visible again", dead, err)
	}
	second = y.lease(exchange.LeaseRequest{})
	if len(second.Leases) != 1 || second.Leases[0].Receipt.Attempt != 2 {
		t.Fatalf("lease after the Nack = %+v, want attempt 2", second.Leases)
	}
	if err := y.svc.Release(ctx(t), ownerB, second.Leases[0].Receipt); err != nil {
		t.Fatalf("Release of attempt 2: %v", err)
	}
	q, err = y.svc.ReceivePage(ctx(t), ownerB, nil, exchange.Cursor{}, 0)
	if err != nil || len(q.Leases) != 1 || q.Leases[0].Attempts != 1 || q.Leases[0].Held || q.Leases[0].Hidden(y.clk.Now()) {
		t.Fatalf("Receive after releasing the attempt after a Nack: %+v, %v; want 1 attempt, visible, not held", q.Leases, err)
	}
	wantStale(t, "Ack of a nacked lease after the next attempt was released", y.svc.Ack(ctx(t), ownerB, first.Leases[0].Receipt))
	if again := y.lease(exchange.LeaseRequest{}); len(again.Leases) != 1 || again.Leases[0].Receipt.Attempt != 2 {
		t.Errorf("Lease after the Release = %+v, want attempt 2", again.Leases)
	}
}
