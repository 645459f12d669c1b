package exchangedb_test

import (
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store/exchangedb"
)

// A collect of b that waits for the lock on recipient x's row, held by a Pop at x that takes a
// message out of b's inbox there, must count that inbox from what the Pop left: a statement that
// waits for a row lock re-reads the locked row but not the rows it joined to it (READ COMMITTED),
// so an inbox count read with the lock was one too many (issue 17's benchmark work, which read
// the inbox in the locking statement).
func TestCollectWaitingOnAPopCountsTheInboxAfterIt(t *testing.T) {
	url, e := postgresEngine(t, nil)
	ctx := tctx(t)
	x, b := uuid.New(), uuid.New()
	register(t, e, x, b)
	send(t, e, b, envelope.IDParticipant(x), "one")
	send(t, e, b, envelope.IDParticipant(x), "two")
	if _, err := e.Collect(ctx, b, exchange.ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	send(t, e, b, envelope.IDParticipant(x), "three")

	// A Pop at x, held open by a session of the test: x's row locked as a Pop locks it, the
	// oldest message of b's inbox there popped, the counts taken down.
	conn, tx := sessionTx(t, ctx, url)
	for _, q := range []string{
		`SELECT 1 FROM exchange_owners WHERE owner = $1 FOR NO KEY UPDATE`,
		`UPDATE exchange_ledger SET state = '` + exchangedb.StPopped + `', done_at = 1 WHERE recipient = $1 AND message =
			(SELECT message FROM exchange_ledger WHERE holder = $1 AND state = '` + exchangedb.StInbox + `' ORDER BY seq LIMIT 1)`,
		`UPDATE exchange_inboxes SET count = count - 1 WHERE owner = $1`,
		`UPDATE exchange_owners SET inbox = inbox - 1 WHERE owner = $1`,
	} {
		if _, err := tx.Exec(ctx, q, x.String()); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	collected := make(chan error, 1)
	go func() {
		_, err := e.Collect(ctx, b, exchange.ReportOptions{})
		collected <- err
	}()
	waitBlockedBy(t, ctx, conn, tx, "the collect to wait for x's row")
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-collected; err != nil {
		t.Fatal(err)
	}
	var count, rows int
	if err := conn.QueryRow(ctx, `SELECT count FROM exchange_inboxes WHERE owner = $1 AND sender = $2`, x.String(), b.String()).Scan(&count); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM exchange_ledger WHERE holder = $1 AND state = $2`, x.String(), exchangedb.StInbox).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if count != 2 || rows != 2 {
		t.Errorf("b's inbox at x counts %d with %d messages in it, want 2 and 2", count, rows)
	}
}
