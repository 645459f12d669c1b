package exchangedb_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/exchange/exchangetest"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/postgres"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// benchSendCollect is issue 17's benchmark shape in process: 100 owners, each op a direct Send
// to the next owner and a Collect of the sender, 50 at a time.
func benchSendCollect(b *testing.B, svc exchange.Service, pg bool) {
	ctx := context.Background()
	owners := make([]uuid.UUID, 100)
	for i := range owners {
		owners[i] = uuid.New()
		if _, err := svc.Register(ctx, owners[i]); err != nil {
			b.Fatal(err)
		}
	}
	var next atomic.Int64
	b.SetParallelism(50)
	cpu := startCPU(b, pg)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1)) % len(owners)
			from, to := owners[i], owners[(i+1)%len(owners)]
			if _, err := svc.Send(ctx, exchange.SendRequest{Sender: from, Recipient: envelope.IDParticipant(to), Content: jsonv.StringValue("hi")}); err != nil {
				b.Fatal(err)
			}
			if _, err := svc.Collect(ctx, from, exchange.ReportOptions{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "rounds/s")
	cpu.report(b)
}

func BenchmarkSendCollectMemory(b *testing.B) {
	svc := exchange.Memory(exchange.WithMaxInbox(0), exchange.WithByteBudget(0))
	defer svc.Close()
	benchSendCollect(b, svc, false)
}

func BenchmarkSendCollectSQLite(b *testing.B) {
	s := openSQLiteB(b)
	defer s.Close()
	e := sqliteEngineB(s, exchangetest.Options{MaxInbox: exchangetest.NoBound})
	defer e.Close()
	pages := s.WALPages()
	benchSendCollect(b, e, false)
	commits, writes := s.Writes()
	b.ReportMetric(float64(writes)/float64(max(commits, 1)), "writes/commit")
	b.ReportMetric(float64(s.WALPages()-pages)/float64(max(b.N, 1)), "wal-pages/op")
}

func BenchmarkSendCollectPostgres(b *testing.B) {
	url := benchPGURL(b)
	s, err := postgres.Open(context.Background(), postgres.Config{URL: url, MaxConns: 10})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := exchangedb.New(s.ExchangeDriver(), exchangetest.Options{MaxInbox: exchangetest.NoBound}.ExchangeOptions())
	defer e.Close()
	benchSendCollect(b, e, true)
}

// benchBroadcastCollect is review17 R5's case: a broadcast to 300 owners and its Collect, which
// locks every owner row and lands in an inbox at each.
func benchBroadcastCollect(b *testing.B, svc exchange.Service, pg bool) {
	ctx := context.Background()
	owners := make([]uuid.UUID, 300)
	for i := range owners {
		owners[i] = uuid.New()
		if _, err := svc.Register(ctx, owners[i]); err != nil {
			b.Fatal(err)
		}
	}
	cpu := startCPU(b, pg)
	for b.Loop() {
		if _, err := svc.Send(ctx, exchange.SendRequest{Sender: owners[0], Recipient: envelope.None(), Content: jsonv.StringValue("hi")}); err != nil {
			b.Fatal(err)
		}
		if _, err := svc.Collect(ctx, owners[0], exchange.ReportOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	cpu.report(b)
}

func BenchmarkBroadcastCollectSQLite(b *testing.B) {
	s := openSQLiteB(b)
	defer s.Close()
	e := sqliteEngineB(s, exchangetest.Options{MaxInbox: exchangetest.NoBound})
	defer e.Close()
	benchBroadcastCollect(b, e, false)
}

func BenchmarkBroadcastCollectPostgres(b *testing.B) {
	s, err := postgres.Open(context.Background(), postgres.Config{URL: benchPGURL(b), MaxConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := exchangedb.New(s.ExchangeDriver(), exchangetest.Options{MaxInbox: exchangetest.NoBound}.ExchangeOptions())
	defer e.Close()
	benchBroadcastCollect(b, e, true)
}

// Issue 18's benchmark, in process: Lease+Ack round trips per second at concurrency 50 against
// Send+PopMessage on the same engine (target: >= 0.5x). 100 owners, owner i sending to owner i+1.
// A Send+Pop op is the whole LionAGI round (Send, Collect the sender, Pop at the recipient); a
// Lease+Ack op is the acknowledged receipt of a message already in the inbox (the inboxes are
// filled before the timer starts), and a Pop op is the unacknowledged receipt alone, for the
// stricter comparison of the two ways to take a message.
type leaseBench struct {
	svc    exchange.Service
	owners []uuid.UUID
	next   atomic.Int64
}

func newLeaseBench(b *testing.B, svc exchange.Service) *leaseBench {
	ctx := context.Background()
	lb := &leaseBench{svc: svc, owners: make([]uuid.UUID, 100)}
	for i := range lb.owners {
		lb.owners[i] = uuid.New()
		if _, err := svc.Register(ctx, lb.owners[i], exchange.OwnerSettings{Visibility: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
	return lb
}

// fill puts per messages in each owner's inbox (from the owner before it), untimed.
func (lb *leaseBench) fill(b *testing.B, per int) {
	ctx := context.Background()
	for i, from := range lb.owners {
		to := lb.owners[(i+1)%len(lb.owners)]
		for range per {
			if _, err := lb.svc.Send(ctx, exchange.SendRequest{Sender: from, Recipient: envelope.IDParticipant(to), Content: jsonv.StringValue("hi")}); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := lb.svc.Collect(ctx, from, exchange.ReportOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// run runs op for owner index i (and its sender, the owner before it), 50 at a time per core.
func (lb *leaseBench) run(b *testing.B, op func(ctx context.Context, owner, sender uuid.UUID) error) {
	ctx := context.Background()
	n := len(lb.owners)
	b.SetParallelism(50)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(lb.next.Add(1)) % n
			if err := op(ctx, lb.owners[i], lb.owners[(i+n-1)%n]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func benchSendPop(b *testing.B, svc exchange.Service) {
	lb := newLeaseBench(b, svc)
	lb.run(b, func(ctx context.Context, owner, sender uuid.UUID) error {
		if _, err := svc.Send(ctx, exchange.SendRequest{Sender: sender, Recipient: envelope.IDParticipant(owner), Content: jsonv.StringValue("hi")}); err != nil {
			return err
		}
		if _, err := svc.Collect(ctx, sender, exchange.ReportOptions{}); err != nil {
			return err
		}
		// Another op of the same sender may have collected this Send and popped it: a Pop that
		// finds the inbox empty is still a round trip, as Lease's is.
		_, _, err := svc.PopIf(ctx, owner, sender, nil)
		return err
	})
}

func benchPop(b *testing.B, svc exchange.Service) {
	lb := newLeaseBench(b, svc)
	lb.fill(b, b.N/len(lb.owners)+1)
	lb.run(b, func(ctx context.Context, owner, sender uuid.UUID) error {
		if _, ok, err := svc.PopIf(ctx, owner, sender, nil); err != nil || !ok {
			return fmt.Errorf("Pop = %v, %v", ok, err)
		}
		return nil
	})
}

func benchLeaseAck(b *testing.B, svc exchange.Service) {
	lb := newLeaseBench(b, svc)
	lb.fill(b, b.N/len(lb.owners)+1)
	lb.run(b, func(ctx context.Context, owner, _ uuid.UUID) error {
		l, err := svc.Lease(ctx, exchange.LeaseRequest{Owner: owner})
		if err != nil || len(l.Leases) != 1 {
			return fmt.Errorf("Lease = %d leases, %v", len(l.Leases), err)
		}
		return svc.Ack(ctx, owner, l.Leases[0].Receipt)
	})
}

// The lease benchmarks' engines hold unbounded inboxes and outboxes, so that only the round trip
// is measured; withSQLite and withPostgres open one, run bench on it and close both.
var leaseBenchOptions = exchangetest.Options{MaxInbox: exchangetest.NoBound, MaxOutbox: exchangetest.NoBound}

func withSQLite(b *testing.B, bench func(*testing.B, exchange.Service)) {
	s := openSQLiteB(b)
	defer s.Close()
	e := sqliteEngineB(s, leaseBenchOptions)
	defer e.Close()
	bench(b, e)
}

func withPostgres(b *testing.B, bench func(*testing.B, exchange.Service)) {
	s := openPostgresB(b)
	defer s.Close()
	e := exchangedb.New(s.ExchangeDriver(), leaseBenchOptions.ExchangeOptions())
	defer e.Close()
	bench(b, e)
}

func BenchmarkSendPopSQLite(b *testing.B)  { withSQLite(b, benchSendPop) }
func BenchmarkPopSQLite(b *testing.B)      { withSQLite(b, benchPop) }
func BenchmarkLeaseAckSQLite(b *testing.B) { withSQLite(b, benchLeaseAck) }

// openPostgresB opens a postgres store for a benchmark with 10 connections (the machine is
// shared); the caller closes it.
func openPostgresB(b *testing.B) *postgres.Store {
	s, err := postgres.Open(context.Background(), postgres.Config{URL: pgtest.New(b), MaxConns: 10})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkSendPopPostgres(b *testing.B)  { withPostgres(b, benchSendPop) }
func BenchmarkPopPostgres(b *testing.B)      { withPostgres(b, benchPop) }
func BenchmarkLeaseAckPostgres(b *testing.B) { withPostgres(b, benchLeaseAck) }
