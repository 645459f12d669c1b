//go:build e2e

package e2e

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/exchange"
)

// readPostgresLedger reads the Exchange's ledger straight from the replicas' database at url (its
// search_path names the test's schema): the table exchange_ledger of migration 00002_exchange.sql,
// one row per (tenant, message, recipient) with its state (docs/decisions/0019). Reading the rows,
// not a replica's answers, is the point: the ledger is what the database holds whatever the
// replicas say. Terminal rows are pruned only after the retention (1 h by default), far beyond
// the test. Leases (issue 18, migration 00003_leases.sql) add a row's attempts: an inbox row that
// was ever leased (attempts > 0) is the ledger's leased state, as exchangedb's Ledger reports it;
// an acknowledged one is stored as acked.
func readPostgresLedger(ctx context.Context, t *testing.T, url string) []exchange.LedgerEntry {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("reading the ledger: %v", err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT message, sender, recipient, state, reason, attempts FROM exchange_ledger`)
	if err != nil {
		t.Fatalf("reading the ledger: %v", err)
	}
	var out []exchange.LedgerEntry
	for rows.Next() {
		var msg, sender, rcpt, state string
		var reason, attempts int64
		if err := rows.Scan(&msg, &sender, &rcpt, &state, &reason, &attempts); err != nil {
			t.Fatalf("reading the ledger: %v", err)
		}
		m, err1 := uuid.Parse(msg)
		s, err2 := uuid.Parse(sender)
		if err1 != nil || err2 != nil {
			t.Fatalf("ledger row (%q, %q, %q): message or sender is not a UUID", msg, sender, rcpt)
		}
		e := exchange.LedgerEntry{Message: m, Sender: s, Recipient: rcpt, State: exchange.LedgerState(state), Reason: exchange.Reason(reason), Attempts: int(attempts)}
		if e.State == exchange.LedgerInbox && e.Attempts > 0 {
			e.State = exchange.LedgerLeased
		}
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("reading the ledger: %v", err)
	}
	return out
}
