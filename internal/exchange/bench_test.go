package exchange

import (
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// benchOwners registers n owners.
func benchOwners(b *testing.B, x *Exchange, n int) []uuid.UUID {
	b.Helper()
	owners := make([]uuid.UUID, n)
	for i := range owners {
		owners[i] = uuid.New()
		if _, err := x.Register(owners[i]); err != nil {
			b.Fatal(err)
		}
	}
	return owners
}

// emptyInboxes re-registers every owner, dropping what they hold, with the timer stopped, so that
// long runs measure routing rather than growing inboxes.
func emptyInboxes(b *testing.B, x *Exchange, owners []uuid.UUID) {
	b.StopTimer()
	for _, o := range owners {
		x.Unregister(o)
		if _, err := x.Register(o); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
}

// BenchmarkSendCollect measures send + collect, one message per iteration, direct (to one other
// owner) and broadcast (to every other owner), with 10 and 100 registered owners. msgs/s counts
// sent messages; deliveries/s counts inbox appends.
func BenchmarkSendCollect(b *testing.B) {
	for _, mode := range []string{"direct", "broadcast"} {
		for _, n := range []int{10, 100} {
			b.Run(fmt.Sprintf("%s/owners=%d", mode, n), func(b *testing.B) {
				x := New(WithMaxInbox(0), WithMaxOutbox(0))
				owners := benchOwners(b, x, n)
				content := text("benchmark payload")
				delivered := 0
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					from := owners[i%n]
					rcpt := envelope.None()
					if mode == "direct" {
						rcpt = to(owners[(i+1)%n])
					}
					if _, err := x.Send(SendRequest{Sender: from, Recipient: rcpt, Content: content}); err != nil {
						b.Fatal(err)
					}
					rep, err := x.Collect(from)
					if err != nil {
						b.Fatal(err)
					}
					delivered += len(rep.Deliveries[0].Reached)
					if i%4096 == 4095 {
						emptyInboxes(b, x, owners)
					}
				}
				secs := b.Elapsed().Seconds() // without the stopped inbox resets
				b.ReportMetric(float64(b.N)/secs, "msgs/s")
				b.ReportMetric(float64(delivered)/secs, "deliveries/s")
			})
		}
	}
}

// BenchmarkCollectBesideSends measures ten owners sending to each other (each collects its own
// outbox every 16 sends), alone and beside one busy owner that keeps collecting outboxes of 2,000
// messages. With per-owner locking the busy collect costs the others CPU share only: the senders'
// p99 latency stays far below the busy collect's own duration, which a shared lock would add to it.
func BenchmarkCollectBesideSends(b *testing.B) {
	for _, busy := range []bool{false, true} {
		name := "alone"
		if busy {
			name = "beside-busy-collect"
		}
		b.Run(name, func(b *testing.B) {
			x := New(WithMaxInbox(0), WithMaxOutbox(0))
			senders := benchOwners(b, x, 10)
			hot := benchOwners(b, x, 2) // hot[0] collects; hot[1] is its sink
			stop := make(chan struct{})
			var busyWG sync.WaitGroup
			var busyCollects, busyNanos atomic.Int64
			if busy {
				busyWG.Go(func() { busyCollector(b, x, hot, stop, &busyCollects, &busyNanos) })
			}
			var next atomic.Int64
			samples := make([][]time.Duration, len(senders))
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for g := range senders {
				wg.Go(func() {
					from, rcpt := senders[g], to(senders[(g+1)%len(senders)])
					for i := 0; next.Add(1) <= int64(b.N); i++ {
						t0 := time.Now()
						_, err := x.Send(SendRequest{Sender: from, Recipient: rcpt, Content: text("x")})
						if i%8 == 0 {
							samples[g] = append(samples[g], time.Since(t0))
						}
						if err != nil {
							b.Error(err)
							return
						}
						if i%16 == 15 {
							if _, err := x.Collect(from); err != nil {
								b.Error(err)
								return
							}
						}
					}
				})
			}
			wg.Wait()
			secs := time.Since(start).Seconds()
			close(stop)
			busyWG.Wait()
			b.ReportMetric(float64(b.N)/secs, "sends/s")
			all := slices.Concat(samples...)
			if len(all) > 0 {
				slices.Sort(all)
				b.ReportMetric(float64(all[len(all)/2].Nanoseconds())/1e3, "p50-send-µs")
				b.ReportMetric(float64(all[len(all)*99/100].Nanoseconds())/1e3, "p99-send-µs")
			}
			if n := busyCollects.Load(); n > 0 {
				b.ReportMetric(float64(busyNanos.Load())/float64(n)/1e3, "busy-collect-µs")
			}
		})
	}
}

// busyCollector keeps hot[0] busy until stop: it queues 2,000 messages for hot[1], collects them
// (timed), and empties hot[1] by re-registering it.
func busyCollector(b *testing.B, x *Exchange, hot []uuid.UUID, stop <-chan struct{}, collects, nanos *atomic.Int64) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		for range 2000 {
			if _, err := x.Send(SendRequest{Sender: hot[0], Recipient: to(hot[1]), Content: text("hot")}); err != nil {
				b.Error(err)
				return
			}
		}
		t0 := time.Now()
		if _, err := x.Collect(hot[0]); err != nil {
			b.Error(err)
			return
		}
		nanos.Add(int64(time.Since(t0)))
		collects.Add(1)
		x.Unregister(hot[1])
		if _, err := x.Register(hot[1]); err != nil {
			b.Error(err)
			return
		}
	}
}

// BenchmarkSendPop measures the paths of an owner that never leases (issue 18: leases must not
// slow them down): LionAGI's destructive round trip, send + collect + pop, one message per
// iteration; and Pop alone, draining an inbox filled beforehand with b.N messages.
func BenchmarkSendPop(b *testing.B) {
	benchTakes(b, "pop-deep-inbox", pop)
}

// BenchmarkLeaseAck measures acknowledged delivery beside BenchmarkSendPop's figures (issue 18's
// benchmark asks Lease+Ack for at least half of Send+PopMessage): send + collect + lease + ack one
// message per iteration, and Lease+Ack alone draining a deep inbox, by one goroutine and by 50.
func BenchmarkLeaseAck(b *testing.B) {
	benchTakes(b, "lease-ack-deep-inbox", leaseAck)
}

// benchTakes runs the shapes BenchmarkSendPop and BenchmarkLeaseAck share, each iteration taking
// one message of owners[1]'s inbox with take: after a Send and a Collect ("round-trip"), and
// draining an inbox filled beforehand with b.N messages, by one goroutine (deep) and by 50
// (deep+"-c50"). take reports its own failure with b.Error and returns false.
func benchTakes(b *testing.B, deep string, take func(*testing.B, *Exchange, []uuid.UUID) bool) {
	b.Run("round-trip", func(b *testing.B) {
		x := New(WithMaxInbox(0), WithMaxOutbox(0))
		owners := benchOwners(b, x, 2)
		content := text("benchmark payload")
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := x.Send(SendRequest{Sender: owners[0], Recipient: to(owners[1]), Content: content}); err != nil {
				b.Fatal(err)
			}
			if _, err := x.Collect(owners[0]); err != nil {
				b.Fatal(err)
			}
			if !take(b, x, owners) {
				b.FailNow()
			}
		}
	})
	b.Run(deep, func(b *testing.B) {
		x, owners := deepInbox(b, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if !take(b, x, owners) {
				b.FailNow()
			}
		}
	})
	b.Run(deep+"-c50", func(b *testing.B) {
		x, owners := deepInbox(b, b.N)
		b.ReportAllocs()
		b.SetParallelism(max(1, 50/runtime.GOMAXPROCS(0)))
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if !take(b, x, owners) {
					return
				}
			}
		})
	})
}

// deepInbox returns an Exchange whose owners[1] holds n messages from owners[0].
func deepInbox(b *testing.B, n int) (*Exchange, []uuid.UUID) {
	b.Helper()
	x := New(WithMaxInbox(0), WithMaxOutbox(0))
	owners := benchOwners(b, x, 2)
	content := text("benchmark payload")
	for range n {
		if _, err := x.Send(SendRequest{Sender: owners[0], Recipient: to(owners[1]), Content: content}); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := x.Collect(owners[0]); err != nil {
		b.Fatal(err)
	}
	return x, owners
}

// pop pops owners[1]'s oldest message from owners[0].
func pop(b *testing.B, x *Exchange, owners []uuid.UUID) bool {
	if _, ok := x.Pop(owners[1], owners[0]); !ok {
		b.Error("Pop found nothing")
		return false
	}
	return true
}

// leaseAck leases one message of owners[1]'s inbox and acknowledges it.
func leaseAck(b *testing.B, x *Exchange, owners []uuid.UUID) bool {
	l, err := x.Lease(LeaseRequest{Owner: owners[1], Sender: &owners[0]})
	if err != nil || len(l.Leases) != 1 {
		b.Errorf("Lease = %d leases, %v; want 1", len(l.Leases), err)
		return false
	}
	if err := x.Ack(owners[1], l.Leases[0].Receipt); err != nil {
		b.Error(err)
		return false
	}
	return true
}

// BenchmarkPopSteady measures Pop on an inbox kept 1,000 deep and warm: each iteration pops the
// head and delivers it again at the tail (no Send or Collect around it), so that a few
// nanoseconds added to the lease-free Pop path would show (issue 18).
func BenchmarkPopSteady(b *testing.B) {
	x, owners := deepInbox(b, 1000)
	r := x.lookup(owners[1])
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		m, ok := x.Pop(owners[1], owners[0])
		if !ok {
			b.Fatal("Pop found nothing")
		}
		x.deliver(r, owners[0], entry{msg: m})
	}
}
