package sqlite

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/storetest"
)

// issue 17: the Exchange's writes run without a savepoint (exchangeDriver.Write). One that fails
// after it wrote must leave nothing behind and fail alone: its batch is rolled back and the other
// writes run again and commit. One that fails before it wrote fails alone, and the others commit
// in their first run.
func TestExchangeWriteFailingAfterItWroteFailsAlone(t *testing.T) {
	for _, tc := range []struct {
		name     string
		first    string // what the failing write runs before it fails: "insert", "select" or "update"
		wantRuns int    // of the function of the write queued before it
	}{
		{"after a write", "insert", 2}, // the batch, rolled back at the failure, then again without it
		{"before any write", "select", 1},
		// A guarded UPDATE ... RETURNING that matched no row wrote nothing (Send to a full outbox).
		{"after an update that matched nothing", "update", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestStore(t, storetest.Options{})
			d := s.ExchangeDriver()
			ctx := context.Background()
			insert := func(ctx context.Context, q exchangedb.Querier, name string) error {
				_, err := q.Exec(ctx, `INSERT INTO exchange_counters (tenant, name, value) VALUES ('', ?, 1)`, name)
				return err
			}
			release, done := holdWriter(t, s)
			fail := errors.New("failed on purpose")
			var (
				wg      sync.WaitGroup
				errs    [3]error
				afters  [3]int
				runs    [3]int
				afterMu sync.Mutex
			)
			for i, name := range []string{"a", "b", "c"} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[i] = d.Write(ctx, func(ctx context.Context, q exchangedb.Querier) error {
						runs[i]++ // the writer goroutine's alone
						if name != "b" {
							return insert(ctx, q, name)
						}
						switch tc.first {
						case "insert":
							if err := insert(ctx, q, name); err != nil {
								return err
							}
						case "select":
							var n int64
							if err := q.QueryRow(ctx, `SELECT count(*) FROM exchange_counters`).Scan(&n); err != nil {
								return err
							}
						case "update":
							var n int64
							err := q.QueryRow(ctx, `UPDATE exchange_counters SET value = value + 1 WHERE tenant = '' AND name = 'none' RETURNING value`).Scan(&n)
							if !q.IsNoRows(err) {
								return fmt.Errorf("the update of no row: %v, want no rows", err)
							}
						}
						return fail
					}, func() { afterMu.Lock(); afters[i]++; afterMu.Unlock() })
				}()
				queued(s, i+1)
			}
			close(release)
			<-done
			wg.Wait()
			if !errors.Is(errs[1], fail) {
				t.Fatalf("the failing write: %v, want its own error", errs[1])
			}
			if errs[0] != nil || errs[2] != nil {
				t.Fatalf("the batch's other writes failed: %v, %v", errs[0], errs[2])
			}
			if afters != [3]int{1, 0, 1} {
				t.Errorf("after ran %v times, want [1 0 1]", afters)
			}
			if runs != [3]int{tc.wantRuns, 1, 1} {
				t.Errorf("the writes' functions ran %v times, want [%d 1 1]", runs, tc.wantRuns)
			}
			got := map[string]bool{}
			if err := d.Read(ctx, func(ctx context.Context, q exchangedb.Querier) error {
				rows, err := q.Query(ctx, `SELECT name FROM exchange_counters`)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var name string
					if err := rows.Scan(&name); err != nil {
						return err
					}
					got[name] = true
				}
				return rows.Err()
			}); err != nil {
				t.Fatal(err)
			}
			if !got["a"] || got["b"] || !got["c"] || len(got) != 2 {
				t.Fatalf("rows %v, want a and c alone", got)
			}
		})
	}
}
