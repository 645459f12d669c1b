package postgres

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/historyd/historyd/internal/store"
)

// metaKeys counts the store_meta rows of keys, as another connection sees
// them.
func metaKeys(t *testing.T, s *Store, keys ...string) int {
	t.Helper()
	var n int
	if err := s.pool.QueryRow(tctx(t), `SELECT count(*) FROM store_meta WHERE key = ANY($1)`, keys).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func putMeta(b *pgx.Batch, key string) { b.Queue(qMarkDead, key, "1") }

// Issue 16 benchmark (two round trips a write): BEGIN rides with the
// first batch, the handed statements with COMMIT; nothing is visible
// before the COMMIT, everything after, and the connection goes back to
// the pool outside any transaction.
func TestLazyTxCommits(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	ctx := tctx(t)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx := newLazyTx(conn, pgx.TxOptions{})
	first := &pgx.Batch{}
	putMeta(first, "lazy-1")
	if err := tx.SendBatch(ctx, first).Close(); err != nil {
		t.Fatal(err)
	}
	if st := conn.Conn().PgConn().TxStatus(); st != 'T' {
		t.Fatalf("after the first batch the connection's status is %c, want T (BEGIN went with it)", st)
	}
	last := &pgx.Batch{}
	putMeta(last, "lazy-2")
	tx.commitWith(last)
	if n := metaKeys(t, s, "lazy-1", "lazy-2"); n != 0 {
		t.Fatalf("%d rows visible before the COMMIT, want 0", n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if n := metaKeys(t, s, "lazy-1", "lazy-2"); n != 2 {
		t.Fatalf("%d rows visible after the COMMIT, want 2", n)
	}
	if n := s.pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after the COMMIT", n)
	}
}

// Issue 16 benchmark: a statement that fails in the COMMIT's batch aborts
// the transaction; Commit reports that statement's error and nothing of
// the transaction is applied.
func TestLazyTxCommitBatchFails(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	ctx := tctx(t)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tx := newLazyTx(conn, pgx.TxOptions{})
	first := &pgx.Batch{}
	putMeta(first, "lazy-3")
	if err := tx.SendBatch(ctx, first).Close(); err != nil {
		t.Fatal(err)
	}
	last := &pgx.Batch{}
	putMeta(last, "lazy-4")
	last.Queue(`SELECT 1/0`)
	putMeta(last, "lazy-5")
	tx.commitWith(last)
	err = tx.Commit(ctx)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "22012" {
		t.Fatalf("Commit = %v, want the division's error (22012)", err)
	}
	if n := metaKeys(t, s, "lazy-3", "lazy-4", "lazy-5"); n != 0 {
		t.Fatalf("%d rows applied by a failed commit batch, want 0", n)
	}
	if n := s.pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after the failed COMMIT", n)
	}
}

// Issue 16 ("nothing half-applied"): an AddMessage whose statement fails
// in the COMMIT's batch writes nothing (no message, no event, the head
// unmoved), reports the statement's error, and the next write takes the
// next sequence on a clean connection.
func TestWriteFailingAtCommitAppliesNothing(t *testing.T) {
	s := replicas(t, 1, func(c *Config) { c.MaxConns = 1 })[0]
	br := newBranch(t, s)
	before := add(t, s, br, "before", store.WriteOptions{}).Head
	if _, err := s.pool.Exec(tctx(t), `
		CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN IF NEW.body LIKE '%boom%' THEN RAISE EXCEPTION 'boom'; END IF; RETURN NEW; END $$;
		CREATE TRIGGER boom BEFORE INSERT ON messages FOR EACH ROW EXECUTE FUNCTION boom()`); err != nil {
		t.Fatal(err)
	}
	countEvents := func() (n int) {
		if err := s.pool.QueryRow(tctx(t), `SELECT count(*) FROM events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	events := countEvents()
	_, err := s.AddMessage(tctx(t), br, store.AddInput{Factory: addFactory("boom")}, store.WriteOptions{})
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "P0001" {
		t.Fatalf("AddMessage = %v, want the trigger's error (P0001)", err)
	}
	if n := countEvents(); n != events {
		t.Fatalf("%d events after the failed write, want %d", n, events)
	}
	if got := fullOrder(t, s, br); len(got) != 1 {
		t.Fatalf("%d messages after the failed write, want 1", len(got))
	}
	if head := add(t, s, br, "after", store.WriteOptions{}).Head; head != before+1 {
		t.Fatalf("the next write's head is %d, want %d", head, before+1)
	}
}

// Issue 16 benchmark (fewer statements): an append's three writes become
// qAppend, whose parameters are theirs in order; anything queued after
// them stays, and a batch of another shape is left alone.
func TestMergeAppend(t *testing.T) {
	b := &pgx.Batch{}
	b.Queue(qInsertMessage, 1, 2, 3, 4, 5, 6, 7)
	b.Queue(qInsertEvent, 8, 9, 10, 11, 12, 13, 14, 15)
	b.Queue(qUpdateBranch, 16, 17, 18, 19, 20, 21, 22, 23, 24)
	b.Queue(qRemember, "x")
	mergeAppend(b)
	if b.Len() != 2 || b.QueuedQueries[0].SQL != qAppend || b.QueuedQueries[1].SQL != qRemember {
		t.Fatalf("merged batch %v, want qAppend then qRemember", b.QueuedQueries)
	}
	args := b.QueuedQueries[0].Arguments
	for i, a := range args {
		if a != i+1 {
			t.Fatalf("argument %d is %v, want %d", i, a, i+1)
		}
	}
	if !strings.Contains(qAppend, fmt.Sprintf("$%d", len(args))) || strings.Contains(qAppend, fmt.Sprintf("$%d", len(args)+1)) {
		t.Fatalf("qAppend does not take exactly %d parameters", len(args))
	}
	other := &pgx.Batch{}
	other.Queue(qInsertMessage, 1)
	other.Queue(qInsertEvent, 2)
	other.Queue(qTrimEvents, 3)
	other.Queue(qUpdateBranch, 4)
	mergeAppend(other)
	if other.Len() != 4 {
		t.Fatalf("a batch with a trim between was merged: %d statements", other.Len())
	}
}
