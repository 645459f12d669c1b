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
