package postgres

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
)

// BenchmarkAddMessageWatchers is issue 16's "AddMessage throughput with 0
// and with 100 watchers spread over other replicas": 50 writers on replica
// A over 50 branches, the watchers on replica B. Run it alone, without
// -race (the machine's PostgreSQL is shared):
// go test -run '^$' -bench AddMessageWatchers -benchtime 3000x -timeout 10m ./internal/store/postgres/
func BenchmarkAddMessageWatchers(b *testing.B) {
	for _, watchers := range []int{0, 100} {
		b.Run(fmt.Sprintf("watchers=%d", watchers), func(b *testing.B) {
			r := replicas(b, 2, func(c *Config) { c.MaxConns = 8 })
			a, w := r[0], r[1]
			listening(b, a, w)
			const branches = 50
			ids := make([]uuid.UUID, branches)
			for i := range ids {
				ids[i] = newBranch(b, a)
			}
			var (
				drains    sync.WaitGroup
				subs      []*store.Subscription
				delivered atomic.Int64
			)
			for i := range watchers {
				sub, err := w.Subscribe(tctx(b), ids[i%branches], store.SubscribeInput{})
				if err != nil {
					b.Fatal(err)
				}
				subs = append(subs, sub)
				drains.Add(1)
				go func() {
					defer drains.Done()
					for {
						if _, err := sub.Next(context.Background()); err != nil {
							return
						}
						delivered.Add(1)
					}
				}()
			}
			var next atomic.Int64
			b.SetParallelism(25) // 50 writers on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id := ids[int(next.Add(1))%branches]
				for pb.Next() {
					if _, err := a.AddMessage(context.Background(), id, store.AddInput{Factory: addFactory("x")}, store.WriteOptions{}); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			for _, s := range subs {
				s.Close()
			}
			drains.Wait()
			b.ReportMetric(float64(delivered.Load())/float64(b.N), "deliveries/write")
		})
	}
}
