package exchange

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// heldBytes is what the budget should be charged with: the bytes of every message held in an
// outbox, an inbox or a dead-letter list, a message held n times counted n times, plus the records
// of the remembered requests.
func heldBytes(x *Exchange) int64 {
	var n int64
	for _, f := range x.reg.view().flows(0) {
		f.mu.Lock()
		if !f.closed {
			for _, p := range f.progs {
				if !p.removed {
					for _, e := range p.live() {
						n += messageBytes(e.msg)
					}
				}
			}
			for _, dl := range f.dead.q.live() {
				n += messageBytes(dl.Message)
			}
		}
		f.mu.Unlock()
	}
	x.requests.mu.Lock()
	for _, l := range x.requests.bySender {
		n += l.bytes.Load()
	}
	x.requests.mu.Unlock()
	return n
}

// TestBudgetConservation (issue 11: the Exchange is bounded in bytes): after every step of a
// message's life — send, direct delivery, broadcast, drop to a dead letter, dead-letter eviction,
// pop, unregister — the budget is charged with exactly what is held, and with nothing at the end.
func TestBudgetConservation(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB, ownerC}, WithMaxDeadLetters(1))
	check := func(step string) {
		t.Helper()
		if got, want := x.budget.used.Load(), heldBytes(x); got != want {
			t.Fatalf("%s: budget charged %d bytes, holding %d", step, got, want)
		}
	}
	check("empty")
	mustSend(t, x, ownerA, to(ownerB), "direct")
	mustSend(t, x, ownerA, envelope.None(), strings.Repeat("b", 1000))
	mustSend(t, x, ownerA, to(uuid.New()), "lost 1")
	mustSend(t, x, ownerA, to(uuid.New()), "lost 2") // evicts lost 1 from a dead-letter list of 1
	check("sent")
	if x.budget.used.Load() == 0 {
		t.Fatal("sent messages charged nothing")
	}
	mustCollect(t, x, ownerA)
	check("collected")
	if _, ok := x.Pop(ownerB, ownerA); !ok {
		t.Fatal("nothing to pop")
	}
	check("popped")
	if _, err := x.Send(SendRequest{Sender: ownerC, Recipient: to(ownerA), Content: text("r"), RequestID: "r1"}); err != nil {
		t.Fatal(err)
	}
	check("idempotent send")
	for _, o := range []uuid.UUID{ownerA, ownerB, ownerC} {
		x.Unregister(o)
	}
	check("unregistered")
	if n := x.budget.used.Load(); n != x.requests.lookup(ownerC).bytes.Load() {
		t.Errorf("after every owner left the budget holds %d bytes, want only C's request record", n)
	}
}

// TestBudgetRefusesSend (issue 11: past the budget Send fails RESOURCE_EXHAUSTED with figures and
// nothing is dropped silently): a Send that does not fit queues nothing and says by how much; what
// is held stays; making room (a pop) lets the next Send in.
func TestBudgetRefusesSend(t *testing.T) {
	const budget = 64 << 10
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithByteBudget(budget))
	body := strings.Repeat("x", 10<<10)
	sent := 0
	var refused *BudgetError
	for range 100 {
		_, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), Content: text(body)})
		if errors.As(err, &refused) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		sent++
	}
	if refused == nil {
		t.Fatalf("%d sends of 10 KiB into a 64 KiB budget all succeeded", sent)
	}
	if !errors.Is(refused, ErrBudgetExceeded) || refused.Budget != budget || refused.Used+refused.Need <= budget ||
		refused.Need < 10<<10 {
		t.Errorf("refusal = %+v: want the budget, the bytes used and a need that does not fit", refused)
	}
	for _, k := range []string{"usedBytes", "budgetBytes", "messageBytes"} {
		if refused.ErrorMetadata()[k] == "" {
			t.Errorf("refusal metadata lacks %s", k)
		}
	}
	mustCollect(t, x, ownerA)
	if got := len(x.Receive(ownerB, nil)); got != sent {
		t.Fatalf("inbox holds %d messages after %d successful sends: something was dropped", got, sent)
	}
	if x.budget.used.Load() > budget {
		t.Errorf("budget charged %d bytes, over its %d", x.budget.used.Load(), budget)
	}
	if _, ok := x.Pop(ownerB, ownerA); !ok {
		t.Fatal("nothing to pop")
	}
	if _, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), Content: text(body)}); err != nil {
		t.Errorf("send after a pop made room: %v", err)
	}
}

// TestBudgetRefusesIdempotentSendWholly: with a request id, the message and its record are
// charged together, so a full budget refuses the Send (the id is not remembered, the message not
// queued) rather than queue a message whose repeat would be queued again.
func TestBudgetRefusesIdempotentSendWholly(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithByteBudget(4<<10))
	var err error
	for i := 0; err == nil && i < 100; i++ {
		_, err = x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), Content: text(strings.Repeat("y", 500)), RequestID: uuid.NewString()})
	}
	if !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("idempotent sends into a 4 KiB budget: %v", err)
	}
	s, _ := x.Get(ownerA)
	l := x.requests.lookup(ownerA)
	l.mu.Lock()
	ids := len(l.byID)
	l.mu.Unlock()
	if ids != len(s.Outbox) {
		t.Errorf("%d ids remembered for %d queued messages", ids, len(s.Outbox))
	}
	if got, want := x.budget.used.Load(), heldBytes(x); got != want {
		t.Errorf("budget charged %d bytes, holding %d", got, want)
	}
}

// TestRequestRecordKeepsNoBody (issue 11 case 7: Send's request-id log kept whole messages for 10
// minutes after they were consumed): once a message is popped, its request record no longer holds
// it, yet a repeat of the same request still returns the first message exactly, and a repeat with
// another payload gets its identity.
func TestRequestRecordKeepsNoBody(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB})
	req := SendRequest{Sender: ownerA, Recipient: to(ownerB), Content: text(strings.Repeat("z", 1<<20)), RequestID: "r1"}
	// The test keeps no reference to the message, so only the record could keep it alive.
	wantJSON := func() []byte {
		first, err := x.Send(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := first.MarshalJSON()
		return b
	}()
	mustCollect(t, x, ownerA)
	if _, ok := x.Pop(ownerB, ownerA); !ok {
		t.Fatal("nothing to pop")
	}
	e := x.requests.lookup(ownerA).byID["r1"]
	deadline := time.Now().Add(testTimeout)
	for e.ref.Value() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the popped message is still reachable from its request record")
		}
		runtime.GC()
	}
	if e.size > 1<<10 {
		t.Errorf("the record is charged %d bytes for a 1 MiB message", e.size)
	}
	again, err := x.Send(req)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := again.MarshalJSON(); string(got) != string(wantJSON) {
		t.Error("a repeat of the same request after the pop did not return the first message exactly")
	}
	other, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), Content: text("different"), RequestID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if other.ID != again.ID || other.CreatedAt != again.CreatedAt || !other.Content.Dict().IsNull() {
		t.Errorf("a repeat with another payload = %v %v %v; want the first id and created_at, no content", other.ID, other.CreatedAt, other.Content.Dict())
	}
	if s, _ := x.Get(ownerA); len(s.Outbox) != 0 {
		t.Errorf("repeats queued %d messages", len(s.Outbox))
	}
}

// TestRequestScopesIsolated (issue 11 case 6, the Exchange's side): one sender's traffic never
// evicts another sender's ids within the window: after 10,001 ids from B, A's repeat is still
// answered and queues nothing.
func TestRequestScopesIsolated(t *testing.T) {
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithMaxOutbox(0))
	victim, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), RequestID: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	for range DefaultRequestsPerSender + 1 {
		if _, err := x.Send(SendRequest{Sender: ownerB, Recipient: to(ownerA), RequestID: uuid.NewString()}); err != nil {
			t.Fatal(err)
		}
	}
	again, err := x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), RequestID: "victim"})
	if err != nil || again.ID != victim.ID {
		t.Fatalf("victim's retry = %v, %v; want the first message", again, err)
	}
	if s, _ := x.Get(ownerA); len(s.Outbox) != 1 {
		t.Errorf("victim's outbox holds %d messages, want 1", len(s.Outbox))
	}
}

// TestBudgetConservationConcurrent: sends (with and without request ids, direct and broadcast,
// to owners that come and go), collects, pops and unregisters racing each other leave the budget
// charged with exactly what is held; once every owner has left, only the request records remain.
func TestBudgetConservationConcurrent(t *testing.T) {
	owners := []uuid.UUID{ownerA, ownerB, ownerC, ownerD}
	x := newRegistered(t, owners, WithMaxInbox(20), WithMaxDeadLetters(5), WithByteBudget(1<<20))
	var wg sync.WaitGroup
	for w, o := range owners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				rcpt := to(owners[(w+i)%len(owners)])
				if i%7 == 0 {
					rcpt = envelope.None()
				}
				req := SendRequest{Sender: o, Recipient: rcpt, Content: text(strings.Repeat("c", i))}
				if i%3 == 0 {
					req.RequestID = fmt.Sprintf("%d-%d", w, i%50)
				}
				_, _ = x.Send(req) // full budget, outbox and unregistered senders are all fine here
				switch i % 10 {
				case 4:
					_, _ = x.Collect(o)
				case 6:
					x.Pop(o, owners[(w+1)%len(owners)])
				case 9:
					if w == 0 {
						x.Unregister(ownerD)
						_, _ = x.Register(ownerD)
					}
				}
			}
		}()
	}
	wg.Wait()
	if got, want := x.budget.used.Load(), heldBytes(x); got != want {
		t.Fatalf("budget charged %d bytes, holding %d", got, want)
	}
	for _, o := range owners {
		x.Unregister(o)
	}
	if got, want := x.budget.used.Load(), heldBytes(x); got != want {
		t.Errorf("after every owner left: budget charged %d bytes, records hold %d", got, want)
	}
}

// TestBudgetFreesExpiredRequestRecordsOnAnySend (review of issue 11, finding 2: expired request
// records were released only by a later Send carrying a request id, so a plain Send stayed refused
// once the window had passed, and the logs of senders that left were never swept): request records
// fill the budget until an idempotent Send is refused; the messages are all consumed and the
// sender unregisters; once the request memory's window has passed, a Send without a request id
// from another sender succeeds and the budget holds only what the flows hold.
func TestBudgetFreesExpiredRequestRecordsOnAnySend(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	x := newRegistered(t, []uuid.UUID{ownerA, ownerB}, WithClock(clock), WithByteBudget(8<<10),
		WithRequestMemory(time.Minute, 10_000))
	var err error
	for i := 0; i < 1_000; i++ {
		id := fmt.Sprintf("%0*d", MaxRequestIDLength, i)
		if _, err = x.Send(SendRequest{Sender: ownerA, Recipient: to(ownerB), Content: text("r"), RequestID: id}); err != nil {
			break
		}
		mustCollect(t, x, ownerA)
		if _, ok := x.Pop(ownerB, ownerA); !ok {
			t.Fatal("nothing to pop")
		}
	}
	if !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("request records never filled the budget: %v", err)
	}
	if _, ok := x.Unregister(ownerA); !ok {
		t.Fatal("A was not registered")
	}
	body := strings.Repeat("z", 2_000)
	if _, err := x.Send(SendRequest{Sender: ownerB, Recipient: to(ownerA), Content: text(body)}); !errors.Is(err, ErrBudgetExceeded) {
		t.Fatalf("within the window the records still hold the budget; Send = %v", err)
	}
	now = now.Add(time.Minute + time.Second)
	if _, err := x.Send(SendRequest{Sender: ownerB, Recipient: to(ownerA), Content: text(body)}); err != nil {
		t.Fatalf("plain Send after the window: %v, want the expired records freed", err)
	}
	if got, want := x.budget.used.Load(), heldBytes(x); got != want {
		t.Errorf("budget charged %d bytes, holding %d", got, want)
	}
}
