package postgres

import (
	"context"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// A new deployment's Exchange tables have no statistics until autovacuum's first ANALYZE of
// them (a minute or more after they fill: autovacuum_naptime, and 50 rows plus 10% changed).
// Meanwhile PostgreSQL takes every equality without statistics for a selective one (0.5% of
// the rows), so "tenant = $1", the first column of every index, looks as good a bound as a
// whole key, and which index a statement gets depends on the indexes' sizes at planning: issue
// 17's benchmark (a fresh schema each row, 2 s) had the collect's outbox read planned on
// exchange_ledger_pkey's first column and its ledger UPDATE on exchange_ledger_by_holder's, each
// reading every ledger row of the tenant, a collect after another (1,900 and 4,200 buffers a
// statement after 10,000 rounds, auto_explain with log_buffers; docs/decisions/0019, "Not
// fixed"). Once analysed, tenant has one value for the whole table and neither plan is chosen
// again; ANALYZE invalidates the cached plans of the statements that read the table.
//
// So the Store analyses the Exchange tables that have no statistics yet itself, in the
// background, once this process has committed analyzeAfter[i] Exchange writes: each time only
// the tables still without statistics (an empty table gets none), which is nothing once
// autovacuum or a previous replica has done it. ANALYZE takes SHARE UPDATE EXCLUSIVE, which no
// read or write of the Exchange waits for, samples at most 30,000 rows, and changes no data;
// a role that does not own the tables gets a warning and nothing is analysed, as before.
var analyzeAfter = []int64{500, 5_000, 50_000}

// exchangeTables are the tables analyzeExchange considers: those that grow with the traffic,
// whose statements the prefix plans made read more and more. Not exchange_owners and
// exchange_inboxes, which grow with the owners: analysed with 100 owners (issue 17's benchmark),
// their few pages made the collect's owner lock and read sequential scans of both tables (8 and
// 11 buffers, 98 rows filtered out of each, every collect), about 100 µs more of the backends'
// CPU a round than the key lookups they get without statistics (the ORed (tenant, owner) pairs
// of dialect.go's ownerKeys are planned on the primary key alone).
var exchangeTables = []string{"exchange_ledger", "exchange_messages", "exchange_requests"}

// qStatless is those of exchangeTables in the current schema that have no column statistics.
const qStatless = `SELECT t FROM unnest($1::text[]) AS t WHERE NOT EXISTS
	(SELECT 1 FROM pg_stats s WHERE s.schemaname = current_schema() AND s.tablename = t)`

// exchangeWrote counts a committed Exchange write, and asks the analyser to run at the counts
// of analyzeAfter.
func (s *Store) exchangeWrote() {
	n := s.exWrites.Add(1)
	for _, at := range analyzeAfter {
		if n == at {
			select {
			case s.analyzeNow <- struct{}{}:
			default: // a run is pending: it will see the tables as they are then
			}
			return
		}
	}
}

// runAnalyzer analyses the Exchange tables without statistics each time exchangeWrote asks.
// Owner: the Store; stopped by Close.
func (s *Store) runAnalyzer() {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.analyzeNow:
		}
		ctx, cancel := context.WithTimeout(s.ctx, time.Minute)
		tables, err := s.analyzeExchange(ctx) // a failure leaves it to the next count, or to autovacuum
		cancel()
		if s.hookAnalyzed != nil {
			s.hookAnalyzed(tables, err)
		}
	}
}

// analyzeExchange analyses those of the Exchange tables that have no statistics yet, and returns
// their names.
func (s *Store) analyzeExchange(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, qStatless, exchangeTables)
	if err != nil {
		return nil, err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) == 0 {
		return nil, err
	}
	// The names are exchangeTables' own, not input: no quoting needed.
	if _, err := s.pool.Exec(ctx, "ANALYZE "+strings.Join(tables, ", ")); err != nil {
		return nil, err
	}
	return tables, nil
}
