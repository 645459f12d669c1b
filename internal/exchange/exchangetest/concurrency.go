package exchangetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/exchange"
)

// errList collects the errors of goroutines, which must not call t.Fatal; the test reports them.
type errList struct {
	mu   sync.Mutex
	errs []error
}

func (l *errList) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, err)
}

func (l *errList) report(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, err := range l.errs {
		if i == 10 {
			t.Errorf("... and %d more", len(l.errs)-10)
			break
		}
		t.Error(err)
	}
}

// testConcurrency: many goroutines send, collect, pop, receive, page owners and read stats at
// once; two poppers race on every inbox (issue 17: "concurrent PopMessage calls for the same inbox
// ... never return the same message"). Every message sent is popped exactly once, in its inbox's
// order for each popper, and nothing else is (docs/design.md#exchange; run with -race). The size is
// 8 owners x 25 messages times Capabilities.Scale.
func testConcurrency(t *testing.T, f Factory, caps Capabilities) {
	const owners = 8
	perOwner := 25 * caps.Scale
	x := newFx(t, f, Options{MaxOutbox: NoBound, MaxInbox: NoBound})
	ids := make([]uuid.UUID, owners)
	for i := range ids {
		ids[i] = uuid.New()
		x.register(ids[i])
	}
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var errs errList
	var wg sync.WaitGroup
	var popped sync.Map // message id -> popper
	var poppedN, sentN atomic.Int64
	total := int64(owners * perOwner)

	for i := range owners {
		from, rcpt := ids[i], ids[(i+1)%owners]
		wg.Go(func() { // the sender, collecting its own outbox as it goes
			for n := range perOwner {
				if _, err := x.svc.Send(c, exchange.SendRequest{Sender: from, Recipient: to(rcpt), Content: text(fmt.Sprint(n))}); err != nil {
					errs.add(fmt.Errorf("Send: %w", err))
					return
				}
				sentN.Add(1)
				if n%5 == 4 || n == perOwner-1 {
					if _, err := x.svc.Collect(c, from, exchange.ReportOptions{}); err != nil {
						errs.add(fmt.Errorf("Collect: %w", err))
						return
					}
				}
			}
		})
		for p := range 2 {
			wg.Go(func() { // two poppers of the same inbox
				last := -1
				for poppedN.Load() < total && c.Err() == nil {
					m, ok, err := x.svc.PopIf(c, rcpt, from, nil)
					if err != nil {
						errs.add(fmt.Errorf("PopIf: %w", err))
						return
					}
					if !ok {
						continue
					}
					poppedN.Add(1)
					if prev, dup := popped.LoadOrStore(m.ID, p); dup {
						errs.add(fmt.Errorf("message %s popped twice (poppers %v and %d)", m.ID, prev, p))
					}
					var n int
					fmt.Sscan(content(m), &n)
					if sender, _ := m.Sender.ID(); sender != from || n <= last {
						errs.add(fmt.Errorf("popper %d of %s's inbox got %d from %s after %d", p, from, n, sender, last))
					}
					last = n
				}
			})
		}
	}
	wg.Go(func() { // readers and a collect-all beside the writers
		for poppedN.Load() < total && c.Err() == nil {
			if _, err := x.svc.CollectAll(c, exchange.ReportOptions{}); err != nil {
				errs.add(fmt.Errorf("CollectAll: %w", err))
				return
			}
			for _, o := range ids[:2] {
				p, err := x.svc.ReceivePage(c, o, nil, exchange.Cursor{}, 16)
				if err != nil {
					errs.add(fmt.Errorf("ReceivePage: %w", err))
					return
				}
				seen := map[uuid.UUID]bool{}
				for _, m := range p.Messages {
					if seen[m.ID] {
						errs.add(fmt.Errorf("Receive returned %s twice", m.ID))
					}
					seen[m.ID] = true
				}
			}
			if _, err := x.svc.Stats(c); err != nil {
				errs.add(fmt.Errorf("Stats: %w", err))
			}
			if _, err := x.svc.Owners(c, 0, 3); err != nil {
				errs.add(fmt.Errorf("Owners: %w", err))
			}
		}
	})
	wg.Wait()
	errs.report(t)
	if c.Err() != nil {
		t.Fatalf("popped %d of %d messages before the deadline", poppedN.Load(), total)
	}
	if sentN.Load() != total || poppedN.Load() != total {
		t.Errorf("sent %d, popped %d; want %d each", sentN.Load(), poppedN.Load(), total)
	}
	st, err := x.svc.Stats(ctx(t))
	if err != nil || st.Queued != 0 || st.Inbox != 0 || st.DeadLettered != 0 {
		t.Errorf("Stats after the run = %+v, %v; want nothing held and no dead letter", st, err)
	}
}
