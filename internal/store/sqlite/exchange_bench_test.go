package sqlite

import (
	"context"
	"fmt"
	"testing"

	"github.com/historyd/historyd/internal/cputime"
	"github.com/historyd/historyd/internal/store/exchangedb"
)

// BenchmarkExchangeWriteTx is one Exchange write transaction of the shape of a Pop (a few small
// statements, each prepared once per store), one at a time: what a statement costs per
// transaction once it is cached. review17 R11: when every transaction re-prepared the cached
// statements (Tx.StmtContext of a Conn's statement), this paid the parse of each at every op.
func BenchmarkExchangeWriteTx(b *testing.B) {
	s, err := OpenStore(context.Background(), StoreConfig{Config: Config{Dir: b.TempDir(), CacheKiB: 4096, Readers: 2, Sync: SyncNormal}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	d := s.ExchangeDriver()
	ctx := context.Background()
	const counters = 6
	if err := d.Write(ctx, func(ctx context.Context, q exchangedb.Querier) error {
		for i := range counters {
			if _, err := q.Exec(ctx, `INSERT INTO exchange_counters (tenant, name, value) VALUES ('', ?, 0)`, fmt.Sprint("bench", i)); err != nil {
				return err
			}
		}
		return nil
	}, nil); err != nil {
		b.Fatal(err)
	}
	cpu := cputime.Process()
	b.ResetTimer()
	for b.Loop() {
		err := d.Write(ctx, func(ctx context.Context, q exchangedb.Querier) error {
			var v int64
			if err := q.QueryRow(ctx, `SELECT value FROM exchange_counters WHERE tenant = '' AND name = ?`, "bench0").Scan(&v); err != nil {
				return err
			}
			for i := range counters {
				// Distinct texts, as a Pop's statements are.
				if _, err := q.Exec(ctx, fmt.Sprintf(`UPDATE exchange_counters SET value = value + %d WHERE tenant = '' AND name = ?`, i+1), fmt.Sprint("bench", i)); err != nil {
					return err
				}
			}
			return nil
		}, nil)
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/float64(max(b.N, 1)), "cpu-µs/op")
}
