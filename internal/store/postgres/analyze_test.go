package postgres

import (
	"slices"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
	"github.com/historyd/historyd/internal/store/storetest"
)

// statted lists those of the Exchange tables that have column statistics in s's schema.
func statted(t *testing.T, s *Store) []string {
	t.Helper()
	rows, err := s.pool.Query(tctx(t), `SELECT DISTINCT tablename::text FROM pg_stats WHERE schemaname = current_schema()
		AND tablename = ANY($1) ORDER BY 1`, exchangeTables)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// next is the analyser's next run's tables, failing t when none comes within a minute.
func next(t *testing.T, ran <-chan []string) []string {
	t.Helper()
	select {
	case tables := <-ran:
		return tables
	case <-tctx(t).Done():
		t.Fatal("the analyser did not run")
		return nil
	}
}

// The Exchange's tables get statistics once this process has committed analyzeAfter's first
// count of Exchange writes, without waiting for autovacuum; a later count analyses only the
// tables still without them.
func TestExchangeTablesAnalysedAfterFirstWrites(t *testing.T) {
	saved := analyzeAfter
	analyzeAfter = []int64{12, 14}
	t.Cleanup(func() { analyzeAfter = saved })
	s := openReady(t, testConfig(pgtest.New(t), storetest.Options{}))
	ran := make(chan []string, 2)
	s.hookAnalyzed = func(tables []string, err error) {
		if err != nil {
			t.Errorf("analyse: %v", err)
		}
		ran <- tables
	}
	if got := statted(t, s); len(got) != 0 {
		t.Fatalf("a fresh schema has statistics for %v", got)
	}
	e := exchangedb.New(s.ExchangeDriver(), nil)
	defer e.Close()
	ctx := tctx(t)
	owners := make([]uuid.UUID, 4)
	for i := range owners { // 4 writes
		owners[i] = uuid.New()
		if _, err := e.Register(ctx, owners[i]); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 { // 8 writes: 12 in all
		if _, err := e.Send(ctx, exchange.SendRequest{Sender: owners[i], Recipient: envelope.IDParticipant(owners[(i+1)%4]), Content: jsonv.StringValue("hi")}); err != nil {
			t.Fatal(err)
		}
		if _, err := e.Collect(ctx, owners[i], exchange.ReportOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	first := next(t, ran)
	slices.Sort(first)
	// exchange_requests is empty (no request ids): ANALYZE gives it no statistics.
	want := []string{"exchange_ledger", "exchange_messages", "exchange_requests"}
	if !slices.Equal(first, want) {
		t.Fatalf("analysed %v, want %v", first, want)
	}
	if got, want := statted(t, s), want[:2]; !slices.Equal(got, want) {
		t.Fatalf("tables with statistics %v, want %v", got, want)
	}
	for i := range 2 { // writes 13 and 14
		if _, err := e.Send(ctx, exchange.SendRequest{Sender: owners[i], Recipient: envelope.IDParticipant(owners[i+1]), Content: jsonv.StringValue("hi"), RequestID: "r"}); err != nil {
			t.Fatal(err)
		}
	}
	if second := next(t, ran); !slices.Equal(second, []string{"exchange_requests"}) {
		t.Fatalf("the second run analysed %v, want only the table without statistics", second)
	}
}
