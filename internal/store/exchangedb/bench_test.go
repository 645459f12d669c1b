package exchangedb_test

import (
	"context"
	"sync/atomic"
	"testing"

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
func benchSendCollect(b *testing.B, svc exchange.Service) {
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
}

func BenchmarkSendCollectMemory(b *testing.B) {
	svc := exchange.Memory(exchange.WithMaxInbox(0), exchange.WithByteBudget(0))
	defer svc.Close()
	benchSendCollect(b, svc)
}

func BenchmarkSendCollectSQLite(b *testing.B) {
	s := openSQLiteB(b)
	defer s.Close()
	e := sqliteEngineB(s, exchangetest.Options{MaxInbox: exchangetest.NoBound})
	defer e.Close()
	benchSendCollect(b, e)
	commits, writes := s.Writes()
	b.ReportMetric(float64(writes)/float64(max(commits, 1)), "writes/commit")
}

func BenchmarkSendCollectPostgres(b *testing.B) {
	url := pgtest.New(b)
	s, err := postgres.Open(context.Background(), postgres.Config{URL: url, MaxConns: 10})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := exchangedb.New(s.ExchangeDriver(), exchangetest.Options{MaxInbox: exchangetest.NoBound}.ExchangeOptions())
	defer e.Close()
	benchSendCollect(b, e)
}

// benchBroadcastCollect is review17 R5's case: a broadcast to 300 owners and its Collect, which
// locks every owner row and lands in an inbox at each.
func benchBroadcastCollect(b *testing.B, svc exchange.Service) {
	ctx := context.Background()
	owners := make([]uuid.UUID, 300)
	for i := range owners {
		owners[i] = uuid.New()
		if _, err := svc.Register(ctx, owners[i]); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		if _, err := svc.Send(ctx, exchange.SendRequest{Sender: owners[0], Recipient: envelope.None(), Content: jsonv.StringValue("hi")}); err != nil {
			b.Fatal(err)
		}
		if _, err := svc.Collect(ctx, owners[0], exchange.ReportOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkBroadcastCollectSQLite(b *testing.B) {
	s := openSQLiteB(b)
	defer s.Close()
	e := sqliteEngineB(s, exchangetest.Options{MaxInbox: exchangetest.NoBound})
	defer e.Close()
	benchBroadcastCollect(b, e)
}

func BenchmarkBroadcastCollectPostgres(b *testing.B) {
	s, err := postgres.Open(context.Background(), postgres.Config{URL: pgtest.New(b), MaxConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e := exchangedb.New(s.ExchangeDriver(), exchangetest.Options{MaxInbox: exchangetest.NoBound}.ExchangeOptions())
	defer e.Close()
	benchBroadcastCollect(b, e)
}
