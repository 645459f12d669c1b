package exchange

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// What the conformance cases (exchangetest/lease.go) do not reach in the memory engine: the byte
// budget, the counts that keep lease-free owners on their old paths, the sweep's bookkeeping, the
// bounds, and races between leases and the other calls.

// testClock is a settable clock that counts its reads, safe for concurrent use.
type testClock struct {
	mu    sync.Mutex
	now   time.Time
	reads int
}

func newTestClock() *testClock {
	return &testClock{now: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads++
	return c.now
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func (c *testClock) Reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads
}

// leaseX is an Exchange on clk with A registered with the defaults and B with settings, and the
// messages A sent B collected into B's inbox.
func leaseX(t *testing.T, clk *testClock, settings OwnerSettings, contents []string, opts ...Option) (*Exchange, []*envelope.Message) {
	t.Helper()
	x := newRegistered(t, []uuid.UUID{ownerA}, append([]Option{WithClock(clk.Now)}, opts...)...)
	if _, err := x.Register(ownerB, settings); err != nil {
		t.Fatal(err)
	}
	var sent []*envelope.Message
	for _, c := range contents {
		sent = append(sent, mustSend(t, x, ownerA, to(ownerB), c))
	}
	mustCollect(t, x, ownerA)
	return x, sent
}

func mustLease(t *testing.T, x *Exchange, req LeaseRequest) LeaseResult {
	t.Helper()
	if req.Owner == uuid.Nil {
		req.Owner = ownerB
	}
	r, err := x.Lease(req)
	if err != nil {
		t.Fatalf("Lease(%+v): %v", req, err)
	}
	return r
}

// checkLeaseCounts fails the test unless every registered flow's counts match what it holds: the
// items, the leased entries per inbox and per flow (lease_memory.go: 0 must mean none, or a path
// would skip a lease), and the budget charged with exactly the bytes held (budget.go).
func checkLeaseCounts(t *testing.T, x *Exchange, step string) {
	t.Helper()
	for _, f := range x.reg.view().flows(0) {
		f.mu.Lock()
		if !f.closed {
			items, leased := 0, 0
			for _, p := range f.progs {
				if p.removed {
					continue
				}
				var n int32
				for _, e := range p.live() {
					if e.attempts() > 0 {
						n++
					}
				}
				if n != p.leased {
					t.Errorf("%s: inbox %s counts %d leased entries, holds %d", step, p.name, p.leased, n)
				}
				items += p.len()
				leased += int(n)
			}
			if items != f.items || leased != f.leased {
				t.Errorf("%s: flow %s counts %d items, %d leased; holds %d, %d", step, f.owner, f.items, f.leased, items, leased)
			}
		}
		f.mu.Unlock()
	}
	if got, want := x.budget.used.Load(), heldBytes(x); got != want {
		t.Errorf("%s: budget charged %d bytes, holding %d", step, got, want)
	}
}

// TestLeaseBudget (issue 11's budget beside issue 18's leases): a lease moves no bytes; Ack gives
// the message's back, as Pop does; a max-attempts dead letter keeps them (moved from the inbox to
// the recipient's dead letters, by expiry or by Nack), and the dead-letter bound's eviction gives
// them back; Unregister of an owner holding leased messages gives everything back.
func TestLeaseBudget(t *testing.T) {
	clk := newTestClock()
	x, _ := leaseX(t, clk, OwnerSettings{MaxAttempts: 1, Visibility: time.Second},
		[]string{"acked", "expires", "nacked", "left leased"}, WithMaxDeadLetters(1))
	checkLeaseCounts(t, x, "collected")
	before := x.budget.used.Load()
	// "expires" alone gets a 1s lease.
	var l LeaseResult
	for _, req := range []LeaseRequest{{Visibility: time.Hour}, {Visibility: time.Second}, {Max: 2, Visibility: time.Hour}} {
		l.Leases = append(l.Leases, mustLease(t, x, req).Leases...)
	}
	if len(l.Leases) != 4 || x.budget.used.Load() != before {
		t.Fatalf("Lease took %d and moved the budget from %d to %d; want 4, unchanged", len(l.Leases), before, x.budget.used.Load())
	}
	checkLeaseCounts(t, x, "leased")

	if err := x.Ack(ownerB, l.Leases[0].Receipt); err != nil {
		t.Fatal(err)
	}
	if freed := before - x.budget.used.Load(); freed != messageBytes(l.Leases[0].Message) {
		t.Errorf("Ack freed %d bytes, want the message's %d", freed, messageBytes(l.Leases[0].Message))
	}
	checkLeaseCounts(t, x, "acked")

	clk.Add(time.Second)
	held := x.budget.used.Load()
	if p := x.DeadLetters(ownerB, 0, 0); len(p.Letters) != 1 || p.Letters[0].Reason != ReasonMaxAttempts {
		t.Fatalf("B's dead letters = %+v, want the expired lease", p.Letters)
	}
	if x.budget.used.Load() != held {
		t.Errorf("the expiry's dead letter moved the budget from %d to %d; want its bytes kept", held, x.budget.used.Load())
	}
	checkLeaseCounts(t, x, "expired")

	// The bound of 1 evicts the first dead letter for the Nack's.
	if dead, err := x.Nack(ownerB, l.Leases[2].Receipt, 0); err != nil || !dead {
		t.Fatalf("Nack at max attempts = %v, %v; want a dead letter", dead, err)
	}
	if freed := held - x.budget.used.Load(); freed != messageBytes(l.Leases[1].Message) {
		t.Errorf("the eviction freed %d bytes, want the evicted letter's %d", freed, messageBytes(l.Leases[1].Message))
	}
	if p := x.DeadLetters(ownerB, 0, 0); len(p.Letters) != 1 || p.Evicted != 1 || p.Letters[0].Message.ID != l.Leases[2].Message.ID {
		t.Errorf("B's dead letters = %+v (evicted %d), want the nacked one, 1 evicted", p.Letters, p.Evicted)
	}
	checkLeaseCounts(t, x, "nacked")

	if s, ok := x.Unregister(ownerB); !ok || len(s.Inboxes) != 1 || len(s.Inboxes[0].Messages) != 1 || len(s.DeadLetters) != 1 {
		t.Fatalf("Unregister(B) = %+v; want the leased message and the dead letter", s)
	}
	if n := x.budget.used.Load(); n != 0 {
		t.Errorf("after B left holding a leased message the budget holds %d bytes, want 0", n)
	}
}

// TestReceiveLeaseStates (ReceivedPage.Leases: "nil when no message of the page was ever leased"):
// nil without leases, nil on a page whose messages were never leased even when others were, one
// state per message (zero for the never leased) otherwise; an Ack leaves no state behind, a Nack
// keeps the message's.
func TestReceiveLeaseStates(t *testing.T) {
	clk := newTestClock()
	x, sent := leaseX(t, clk, OwnerSettings{}, []string{"m1", "m2", "m3", "m4"})
	if p := x.ReceivePage(ownerB, nil, Cursor{}, 0); p.Leases != nil {
		t.Fatalf("Receive without leases: states %+v, want nil", p.Leases)
	}
	// Pop m1 so that m2 is at the head, then lease m2; page through two at a time from m3 on.
	if _, ok := x.Pop(ownerB, ownerA); !ok {
		t.Fatal("nothing to pop")
	}
	l := mustLease(t, x, LeaseRequest{})
	p1 := x.ReceivePage(ownerB, nil, Cursor{}, 1)
	if len(p1.Leases) != 1 || p1.Leases[0].Attempts != 1 || !p1.Leases[0].Held {
		t.Errorf("page of m2 = %+v, want its lease", p1.Leases)
	}
	if p2 := x.ReceivePage(ownerB, nil, p1.Next, 2); !sameIDs(p2.Messages, sent[2:]) || p2.Leases != nil {
		t.Errorf("page of m3 m4 = %v with states %+v, want nil states (never leased)", contents(p2.Messages), p2.Leases)
	}
	// Lease m3 too, then Nack m2: a page of m2..m4 shows m2 nacked, m3 held, m4 never leased.
	l3 := mustLease(t, x, LeaseRequest{})
	if _, err := x.Nack(ownerB, l.Leases[0].Receipt, time.Minute); err != nil {
		t.Fatal(err)
	}
	all := x.ReceivePage(ownerB, &ownerA, Cursor{}, 0)
	want := []LeaseInfo{
		{Attempts: 1, VisibleAt: clk.Now().Add(time.Minute)},
		{Attempts: 1, VisibleAt: l3.Leases[0].Deadline, Held: true},
		{},
	}
	if len(all.Leases) != len(want) {
		t.Fatalf("states %+v, want %+v", all.Leases, want)
	}
	for i, w := range want {
		if got := all.Leases[i]; got.Attempts != w.Attempts || got.Held != w.Held || !got.VisibleAt.Equal(w.VisibleAt) {
			t.Errorf("state of %s = %+v, want %+v", contents(all.Messages[i:i+1]), all.Leases[i], want[i])
		}
	}
	// Ack m3, pop m2 once visible: what is left was never leased.
	if err := x.Ack(ownerB, l3.Leases[0].Receipt); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Minute)
	if m, ok := x.Pop(ownerB, ownerA); !ok || m.ID != sent[1].ID {
		t.Fatalf("Pop after the Nack's delay = %v, want m2", m)
	}
	if p := x.ReceivePage(ownerB, nil, Cursor{}, 0); !sameIDs(p.Messages, sent[3:]) || p.Leases != nil {
		t.Errorf("Receive of m4 = %v with states %+v, want nil states", contents(p.Messages), p.Leases)
	}
	checkLeaseCounts(t, x, "end")
}

// TestLeaseFreePathsReadNoClock (issue 18: the lease-free paths cost nothing extra): on an owner
// whose inboxes hold no lease state, Pop, Receive, Get, DeadLetters and Unregister never read the
// clock (the lease checks are skipped on the counts alone); nor do they with leases held short of
// max attempts, where nothing can become a dead letter.
func TestLeaseFreePathsReadNoClock(t *testing.T) {
	clk := newTestClock()
	x, _ := leaseX(t, clk, OwnerSettings{MaxAttempts: 2}, []string{"m1", "m2", "m3"})
	reads := clk.Reads()
	x.Receive(ownerB, nil)
	x.Get(ownerB)
	x.DeadLetters(ownerB, 0, 0)
	if _, ok := x.Pop(ownerB, ownerA); !ok {
		t.Fatal("nothing to pop")
	}
	if n := clk.Reads() - reads; n != 0 {
		t.Errorf("the lease-free calls read the clock %d times, want 0", n)
	}
	mustLease(t, x, LeaseRequest{}) // attempt 1 of 2: no dead letter is due
	reads = clk.Reads()
	x.Receive(ownerB, nil)
	x.Get(ownerB)
	x.DeadLetters(ownerB, 0, 0)
	if n := clk.Reads() - reads; n != 0 {
		t.Errorf("with no last attempt leased, the reads read the clock %d times, want 0", n)
	}
	x.Unregister(ownerB)
	if n := clk.Reads() - reads; n != 0 {
		t.Errorf("Unregister read the clock %d times, want 0", n)
	}
}

// TestLeaseDueFollowsExtend (lease.go: ExtendLease sets the deadline to now + its duration, so it
// may move a last attempt's deadline earlier as well as later): the sweep neither misses the
// earlier deadline nor makes a dead letter before the later one.
func TestLeaseDueFollowsExtend(t *testing.T) {
	clk := newTestClock()
	x, _ := leaseX(t, clk, OwnerSettings{MaxAttempts: 1}, []string{"shortened", "lengthened"})
	l := mustLease(t, x, LeaseRequest{Max: 2, Visibility: 10 * time.Second})
	if _, err := x.ExtendLease(ownerB, l.Leases[0].Receipt, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := x.ExtendLease(ownerB, l.Leases[1].Receipt, time.Hour); err != nil {
		t.Fatal(err)
	}
	clk.Add(time.Second)
	if p := x.DeadLetters(ownerB, 0, 0); len(p.Letters) != 1 || p.Letters[0].Message.ID != l.Leases[0].Message.ID {
		t.Fatalf("dead letters 1s on = %+v, want the shortened lease's message", p.Letters)
	}
	clk.Add(time.Minute) // past the first deadline of the lengthened lease, short of its new one
	if p := x.DeadLetters(ownerB, 0, 0); len(p.Letters) != 1 {
		t.Errorf("dead letters before the extended deadline = %d, want 1", len(p.Letters))
	}
	if err := x.Ack(ownerB, l.Leases[1].Receipt); err != nil {
		t.Errorf("Ack within the extended lease: %v", err)
	}
	checkLeaseCounts(t, x, "end")
}

// TestLeaseDeadLetterReclaims (reclaim.go, lease.go: a departed sender's inbox goes once it is
// empty): the dead letter that empties it, by expiry or by Nack, reclaims it as Pop and Ack do.
func TestLeaseDeadLetterReclaims(t *testing.T) {
	for _, how := range []string{"expiry", "nack"} {
		t.Run(how, func(t *testing.T) {
			clk := newTestClock()
			x, _ := leaseX(t, clk, OwnerSettings{MaxAttempts: 1}, []string{"m1"})
			l := mustLease(t, x, LeaseRequest{Visibility: time.Second})
			x.Unregister(ownerA)
			if n := x.liveInboxes(ownerB); n != 1 {
				t.Fatalf("B has %d inboxes while A's holds a leased message, want 1", n)
			}
			if how == "expiry" {
				clk.Add(time.Second)
				x.Receive(ownerB, nil)
			} else if _, err := x.Nack(ownerB, l.Leases[0].Receipt, 0); err != nil {
				t.Fatal(err)
			}
			if n := x.liveInboxes(ownerB); n != 0 {
				t.Errorf("B has %d inboxes after the dead letter emptied the departed A's, want 0", n)
			}
			if p := x.DeadLetters(ownerB, 0, 0); len(p.Letters) != 1 {
				t.Errorf("B's dead letters = %+v, want 1", p.Letters)
			}
		})
	}
}

// TestLeaseBounds (lease.go's bounds): a batch is at most MaxLeaseBatch; owner settings, lease
// lengths, Nack delays and extensions out of bounds are held at the nearest one; WithLeaseDefaults
// sets what an owner registered without settings gets.
func TestLeaseBounds(t *testing.T) {
	clk := newTestClock()
	contents := make([]string, MaxLeaseBatch+1)
	for i := range contents {
		contents[i] = fmt.Sprint(i)
	}
	x, _ := leaseX(t, clk, OwnerSettings{MaxAttempts: MaxMaxAttempts + 1, Visibility: 24 * time.Hour}, contents,
		WithLeaseDefaults(7, time.Minute))
	now := clk.Now()
	l := mustLease(t, x, LeaseRequest{Max: MaxLeaseBatch + 50})
	if len(l.Leases) != MaxLeaseBatch || !l.Leases[0].Deadline.Equal(now.Add(MaxVisibility)) {
		t.Errorf("Lease of %d took %d, deadline %v; want %d, now+%v", MaxLeaseBatch+50, len(l.Leases), l.Leases[0].Deadline, MaxLeaseBatch, MaxVisibility)
	}
	if f := x.lookup(ownerB); f.settings != (OwnerSettings{MaxAttempts: MaxMaxAttempts, Visibility: MaxVisibility}) {
		t.Errorf("B's settings = %+v, want the bounds", f.settings)
	}
	if d, err := x.ExtendLease(ownerB, l.Leases[0].Receipt, time.Nanosecond); err != nil || !d.Equal(now.Add(MinVisibility)) {
		t.Errorf("ExtendLease by 1ns = %v, %v; want now+%v", d, err, MinVisibility)
	}
	if _, err := x.Nack(ownerB, l.Leases[1].Receipt, -time.Hour); err != nil {
		t.Fatal(err)
	}
	if p := x.ReceivePage(ownerB, nil, Cursor{}, 2); p.Leases[1].Hidden(now) {
		t.Errorf("a Nack with a negative delay left the message hidden: %+v", p.Leases[1])
	}
	if l := mustLease(t, x, LeaseRequest{Visibility: time.Nanosecond}); !l.Leases[0].Deadline.Equal(now.Add(MinVisibility)) {
		t.Errorf("a 1ns lease's deadline = %v, want now+%v", l.Leases[0].Deadline, MinVisibility)
	}
	if _, err := x.Register(ownerC); err != nil {
		t.Fatal(err)
	}
	if f := x.lookup(ownerC); f.settings != (OwnerSettings{MaxAttempts: 7, Visibility: time.Minute}) {
		t.Errorf("C's settings = %+v, want WithLeaseDefaults' 7 and 1m", f.settings)
	}
}

// TestLeaseReleaseCounts (Service.Release: "the attempt is undone, as if the lease had not been
// taken"): a message released back to 0 attempts leaves the counts that keep the lease-free paths
// (so Pop, Receive and the rest read no clock again), and the max-attempts due time noted for its
// lease stops no later call: no dead letter comes of it, and the first walk clears dueAt. One
// released back to 1 attempt stays counted, visible from now, and Pop takes it.
func TestLeaseReleaseCounts(t *testing.T) {
	clk := newTestClock()
	x, sent := leaseX(t, clk, OwnerSettings{MaxAttempts: 1}, []string{"m1", "m2"})
	l := mustLease(t, x, LeaseRequest{Max: 2, Visibility: time.Second})
	for _, le := range l.Leases {
		if err := x.Release(ownerB, le.Receipt); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	checkLeaseCounts(t, x, "released")
	f := x.lookup(ownerB)
	f.mu.Lock()
	leased := f.leased
	f.mu.Unlock()
	if leased != 0 {
		t.Fatalf("B counts %d leased entries after both were released, want 0", leased)
	}
	clk.Add(time.Second) // past the released leases' deadline
	if p := x.DeadLetters(ownerB, 0, 0); len(p.Letters) != 0 {
		t.Fatalf("released leases at max attempts made dead letters %+v", p.Letters)
	}
	reads := clk.Reads()
	if p := x.ReceivePage(ownerB, nil, Cursor{}, 0); !sameIDs(p.Messages, sent) || p.Leases != nil {
		t.Errorf("Receive after the Release = %v, states %+v; want m1 m2, never leased", contents(p.Messages), p.Leases)
	}
	if m, ok := x.Pop(ownerB, ownerA); !ok || m.ID != sent[0].ID {
		t.Errorf("Pop after the Release = %v, %v; want m1", m, ok)
	}
	if n := clk.Reads() - reads; n != 0 {
		t.Errorf("the lease-free paths read the clock %d times after the Release, want 0", n)
	}

	y, sent := leaseX(t, clk, OwnerSettings{MaxAttempts: 3}, []string{"m1"})
	mustLease(t, y, LeaseRequest{Visibility: time.Second})
	clk.Add(time.Second)
	second := mustLease(t, y, LeaseRequest{Visibility: time.Hour})
	if err := y.Release(ownerB, second.Leases[0].Receipt); err != nil {
		t.Fatalf("Release of attempt 2: %v", err)
	}
	checkLeaseCounts(t, y, "attempt 2 released")
	// Held again by the first lease, past its deadline and taken by no one else since
	// (exchangetest's LeaseRelease has the rule).
	if p := y.ReceivePage(ownerB, nil, Cursor{}, 0); len(p.Leases) != 1 || p.Leases[0] != (LeaseInfo{Attempts: 1, VisibleAt: clk.Now(), Held: true}) {
		t.Errorf("state after releasing attempt 2 = %+v, want 1 attempt, visible from now, held by the first lease", p.Leases)
	}
	if m, ok := y.Pop(ownerB, ownerA); !ok || m.ID != sent[0].ID {
		t.Errorf("Pop after releasing attempt 2 = %v, %v; want m1", m, ok)
	}
	checkLeaseCounts(t, y, "popped")
}

// TestLeaseMoreExact (LeaseResult.More: "never unset while one is left"; the memory engine is
// exact): a call that took every visible message says no more, even with hidden ones left behind
// or between; one a limit stopped says more, even past hidden ones.
func TestLeaseMoreExact(t *testing.T) {
	clk := newTestClock()
	x, _ := leaseX(t, clk, OwnerSettings{}, []string{"m1", "m2", "m3", "m4"})
	if l := mustLease(t, x, LeaseRequest{Max: 1}); len(l.Leases) != 1 || !l.More {
		t.Fatalf("Lease of 1 of 4 = %d, more %v; want 1, more", len(l.Leases), l.More)
	}
	l2 := mustLease(t, x, LeaseRequest{Max: 2})
	if len(l2.Leases) != 2 || !l2.More {
		t.Fatalf("Lease of 2 past a held one = %d, more %v; want 2, more (m4)", len(l2.Leases), l2.More)
	}
	if l := mustLease(t, x, LeaseRequest{Max: 1}); len(l.Leases) != 1 || l.More {
		t.Fatalf("Lease of the last visible = %d, more %v; want 1, no more", len(l.Leases), l.More)
	}
	// m2 visible again between held m1 and m3: Max 1 takes it and sees nothing after.
	if _, err := x.Nack(ownerB, l2.Leases[0].Receipt, 0); err != nil {
		t.Fatal(err)
	}
	if l := mustLease(t, x, LeaseRequest{Max: 1}); len(l.Leases) != 1 || l.More {
		t.Errorf("Lease of the one visible between held ones = %d, more %v; want 1, no more", len(l.Leases), l.More)
	}
	if l := mustLease(t, x, LeaseRequest{Max: 5}); len(l.Leases) != 0 || l.More || l.Held != 4 {
		t.Errorf("Lease with everything held = %d, more %v, held %d; want 0, no more, 4", len(l.Leases), l.More, l.Held)
	}
}

// TestPopIfBehindLease (issue 11's PopIf beside issue 18): check is given the oldest visible
// message, not the leased head; its error leaves everything as it was.
func TestPopIfBehindLease(t *testing.T) {
	clk := newTestClock()
	x, sent := leaseX(t, clk, OwnerSettings{}, []string{"leased", "next"})
	l := mustLease(t, x, LeaseRequest{})
	refuse := errors.New("too large")
	var seen *envelope.Message
	if _, ok, err := x.PopIf(ownerB, ownerA, func(m *envelope.Message) error { seen = m; return refuse }); ok || err != refuse {
		t.Fatalf("PopIf with a refusing check = %v, %v", ok, err)
	}
	if seen == nil || seen.ID != sent[1].ID {
		t.Errorf("check was given %v, want %q", seen, "next")
	}
	if got := x.Receive(ownerB, nil); !sameIDs(got, sent) {
		t.Errorf("after the refused PopIf B holds %v", contents(got))
	}
	if err := x.Ack(ownerB, l.Leases[0].Receipt); err != nil {
		t.Errorf("Ack after the refused PopIf: %v", err)
	}
	checkLeaseCounts(t, x, "end")
}

// TestLeaseRaces (issue 18: at-least-once, and never two holders at once): leasers that ack or
// nack, poppers and a sender run at once under -race; every message sent ends in exactly one
// place (acked, popped, dead letter or returned by Unregister), and the counts hold throughout.
func TestLeaseRaces(t *testing.T) {
	clk := newTestClock()
	x, _ := leaseX(t, clk, OwnerSettings{MaxAttempts: 3}, nil, WithMaxInbox(0), WithMaxOutbox(0))
	const n = 600
	var (
		mu     sync.Mutex
		places = map[uuid.UUID][]string{}
		wg     sync.WaitGroup
		errs   = make(chan error, 16)
	)
	note := func(id uuid.UUID, where string) {
		mu.Lock()
		places[id] = append(places[id], where)
		mu.Unlock()
	}
	sending := make(chan struct{})
	wg.Go(func() {
		defer close(sending)
		for i := range n {
			if _, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), Content: text(fmt.Sprint(i))}); err != nil {
				errs <- err
				return
			}
			if i%10 == 9 {
				if _, err := x.Collect(ownerA); err != nil {
					errs <- err
					return
				}
			}
		}
	})
	// drained reports whether the sender is done and B holds nothing visible.
	drained := func() bool {
		select {
		case <-sending:
		default:
			return false
		}
		return len(x.Receive(ownerB, nil)) == 0
	}
	for w := range 3 {
		wg.Go(func() {
			for k := 0; !drained(); k++ {
				l, err := x.Lease(LeaseRequest{Owner: ownerB, Max: 2, Visibility: time.Hour})
				if err != nil {
					errs <- err
					return
				}
				for _, le := range l.Leases {
					// Leaser 0 always fails its handler, leaser 1 every other time, leaser 2 never,
					// though every third batch of its is given back unhandled (Release, as a
					// response cut for its size).
					if w == 2 && k%3 == 0 {
						if err := x.Release(ownerB, le.Receipt); err != nil {
							errs <- fmt.Errorf("release: %w", err)
							return
						}
						continue
					}
					if w == 0 || (w == 1 && k%2 == 0) {
						dead, err := x.Nack(ownerB, le.Receipt, 0)
						if err != nil {
							errs <- fmt.Errorf("nack: %w", err)
							return
						}
						if dead {
							note(le.Message.ID, "dead")
						}
						continue
					}
					if err := x.Ack(ownerB, le.Receipt); err != nil {
						errs <- fmt.Errorf("ack: %w", err)
						return
					}
					note(le.Message.ID, "acked")
				}
			}
		})
	}
	wg.Go(func() {
		for !drained() {
			if m, ok := x.Pop(ownerB, ownerA); ok {
				note(m.ID, "popped")
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	checkLeaseCounts(t, x, "drained")
	s, ok := x.Unregister(ownerB)
	if !ok {
		t.Fatal("B was not registered at the end")
	}
	for _, in := range s.Inboxes {
		for _, m := range in.Messages {
			note(m.ID, "returned")
		}
	}
	dead := 0
	for _, dl := range s.DeadLetters {
		if dl.Reason != ReasonMaxAttempts || dl.Attempts != 3 {
			t.Errorf("dead letter %+v, want max attempts at 3", dl)
		}
		dead++
	}
	if len(places) != n {
		t.Errorf("%d messages accounted for, want %d", len(places), n)
	}
	deadNoted := 0
	byPlace := map[string]int{}
	for id, ws := range places {
		if len(ws) != 1 {
			t.Errorf("message %s ended in %v, want exactly one place", id, ws)
		}
		byPlace[ws[0]]++
		if ws[0] == "dead" {
			deadNoted++
		}
	}
	t.Logf("messages by place: %v", byPlace)
	if deadNoted != dead {
		t.Errorf("%d Nacks made dead letters, B returned %d", deadNoted, dead)
	}
}

// sameIDs reports whether got and want are the same messages in the same order.
func sameIDs(got, want []*envelope.Message) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i].ID != want[i].ID {
			return false
		}
	}
	return true
}

// TestEntryFourWords (flow.go: entry has the shape it had before leases): the lease state did not
// cost the owners that never lease. A first version pointed to it from a fifth word, and Collect's
// batch of one message no longer fit the stack buffer of a small make: every Send+Collect paid one
// more allocation (BenchmarkSendCollect). A second one had seven fields, and every Pop paid about
// 90 more instructions moving them between registers (callgrind on BenchmarkSendPop).
func TestEntryFourWords(t *testing.T) {
	if got, want := unsafe.Sizeof(entry{}), 4*unsafe.Sizeof(uintptr(0)); got != want {
		t.Errorf("an entry is %d bytes, want %d", got, want)
	}
	typ := reflect.TypeFor[entry]()
	if typ.NumField() != 4 {
		t.Errorf("an entry has %d fields, want 4: pack new state into meta", typ.NumField())
	}
	for i := range typ.NumField() {
		switch fl := typ.Field(i); fl.Type.Kind() {
		case reflect.Bool, reflect.Int32, reflect.Int64, reflect.Uint16, reflect.Uint64:
		default:
			if fl.Name != "msg" {
				t.Errorf("entry.%s is a %s: keep the message the entry's only pointer", fl.Name, fl.Type)
			}
		}
	}
	// Nor did the lease count grow a progression, allocated once per (owner, sender).
	if got, want := unsafe.Sizeof(progression{}), 10*unsafe.Sizeof(uintptr(0)); got != want {
		t.Errorf("a progression is %d bytes, want %d", got, want)
	}
}

// TestLeaseMaxBytes (LeaseRequest.MaxBytes counts MessageSize): a budget of exactly two messages'
// sizes takes two, one byte less takes one.
func TestLeaseMaxBytes(t *testing.T) {
	clk := newTestClock()
	x, sent := leaseX(t, clk, OwnerSettings{}, []string{"m1", "m2 longer", "m3"})
	two := MessageSize(sent[0]) + MessageSize(sent[1])
	if l := mustLease(t, x, LeaseRequest{Max: 3, MaxBytes: two - 1}); len(l.Leases) != 1 {
		t.Errorf("MaxBytes %d took %d messages, want 1", two-1, len(l.Leases))
	}
	clk.Add(DefaultVisibility) // m1 is visible again
	if l := mustLease(t, x, LeaseRequest{Max: 3, MaxBytes: two}); len(l.Leases) != 2 {
		t.Errorf("MaxBytes %d took %d messages, want 2", two, len(l.Leases))
	}
}

// TestEntryMeta (flow.go: entry.meta packs the size, the attempts and the flags): each setter
// changes its own bits only.
func TestEntryMeta(t *testing.T) {
	e := newEntry(nil, math.MaxInt32, true)
	e.setAttempts(MaxMaxAttempts)
	e.setHeld(true)
	if e.bytes() != math.MaxInt32 || e.attempts() != MaxMaxAttempts || !e.held() || !e.recipientWasRegistered() {
		t.Fatalf("after setting everything: bytes %d, attempts %d, held %v, registered %v", e.bytes(), e.attempts(), e.held(), e.recipientWasRegistered())
	}
	e.setAttempts(1)
	e.setHeld(false)
	if e.bytes() != math.MaxInt32 || e.attempts() != 1 || e.held() || !e.recipientWasRegistered() {
		t.Errorf("after clearing: bytes %d, attempts %d, held %v, registered %v", e.bytes(), e.attempts(), e.held(), e.recipientWasRegistered())
	}
	if d := e.delivered(); d.bytes() != math.MaxInt32 || d.attempts() != 0 || d.held() || d.recipientWasRegistered() {
		t.Errorf("delivered = %#x, want the size alone", d.meta)
	}
}
