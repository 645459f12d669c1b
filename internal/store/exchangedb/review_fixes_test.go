package exchangedb_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// waitFor polls cond with a deadline (an external process: PostgreSQL's lock table).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// sessionTx opens a session of the test on url and begins a transaction
// there, rolled back (if still open) and closed when the test ends: the
// test takes locks in it that the engine's statements then wait for.
func sessionTx(t *testing.T, ctx context.Context, url string) (*pgx.Conn, pgx.Tx) {
	t.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck // committed or rolled back by the test, or failed
	return conn, tx
}

// waitBlockedBy waits until a statement waits on a lock that tx, a
// transaction on conn, holds.
func waitBlockedBy(t *testing.T, ctx context.Context, conn *pgx.Conn, tx pgx.Tx, what string) {
	t.Helper()
	var holder int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	waitFor(t, what, func() bool {
		var n int
		_ = conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&n)
		return n > 0
	})
}

// Review R1: the memory engine reclaims an empty inbox of a departed sender whatever the order of
// the emptying Pop and the sender's Unregister (internal/exchange/reclaim.go: "Two moments cover
// every order of events"). In the SQL engine, a Pop that checked "sender still registered" before
// the Unregister committed, but decrements count after the Unregister's "DELETE ... count = 0"
// ran, leaves an empty inbox of a gone sender forever (and a re-registered sender's mail lands in
// that old inbox, at its old place, not "after every existing one").
func TestReviewPopRacingSenderUnregisterLeavesStaleInbox(t *testing.T) {
	url, e := postgresEngine(t, nil)
	ctx := tctx(t)
	x, b := uuid.New(), uuid.New()
	register(t, e, x, b)
	send(t, e, b, envelope.IDParticipant(x), "one")
	if _, err := e.Collect(ctx, b, exchange.ReportOptions{}); err != nil {
		t.Fatal(err)
	}

	// A third session holds the (x, b) inbox row, so the Pop stops just before its count update,
	// after it has seen b registered (the interleaving two replicas can produce on their own).
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM exchange_inboxes WHERE owner = $1 AND sender = $2 FOR UPDATE`, x.String(), b.String()); err != nil {
		t.Fatal(err)
	}
	popped := make(chan error, 1)
	go func() {
		_, ok, err := e.PopIf(ctx, x, b, nil)
		if err == nil && !ok {
			err = errors.New("nothing popped")
		}
		popped <- err
	}()
	var xid string
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text`).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	var popPID int
	waitFor(t, "the Pop to wait on the inbox row", func() bool {
		err := conn.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted AND transactionid::text = $1`, xid).Scan(&popPID)
		return err == nil
	})
	// The sender leaves now. Unfixed, its Unregister commits at once (the inbox still counts 1,
	// so its "count = 0" reclaim skips it); fixed, it waits for the Pop, which holds b's row FOR
	// KEY SHARE. Either way, let it get that far before the Pop goes on.
	unregistered := make(chan error, 1)
	go func() {
		_, ok, err := e.UnregisterIf(ctx, b, nil)
		if err == nil && !ok {
			err = errors.New("b was not registered")
		}
		unregistered <- err
	}()
	var unregErr error
	done := false
	waitFor(t, "the Unregister to commit or to wait for the Pop", func() bool {
		select {
		case unregErr = <-unregistered:
			done = true
			return true
		default:
		}
		var n int
		// pg_locks, not pg_stat_activity: conn is inside tx, where the activity view is a
		// snapshot taken once; the lock table is read live.
		_ = conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted AND $1 = ANY(pg_blocking_pids(pid))`, popPID).Scan(&n)
		return n > 0
	})
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if !done {
		unregErr = <-unregistered
	}
	if unregErr != nil {
		t.Fatalf("Unregister(b): %v", unregErr)
	}
	if err := <-popped; err != nil {
		t.Fatal(err)
	}
	snap, ok, err := e.Get(ctx, x)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	for _, in := range snap.Inboxes {
		if in.Sender == b {
			t.Errorf("x still has an (empty: %d messages) inbox of departed sender b: never reclaimed", len(in.Messages))
		}
	}
}

// failingDriver fails the writes numbered in fail (1-based) with a storage fault.
type failingDriver struct {
	exchangedb.Driver
	n    atomic.Int64
	fail map[int64]bool
}

func (d *failingDriver) Write(ctx context.Context, fn func(context.Context, exchangedb.Querier) error, after func()) error {
	if d.fail[d.n.Add(1)] {
		return store.ErrStorageUnavailable
	}
	return d.Driver.Write(ctx, fn, after)
}

// Review R2a: a background collect that fails once (a transient storage fault) is re-noted but
// nothing kicks the collector again: the acknowledged message stays in the outbox until some
// later Send happens to kick it (background.go pass()).
func TestReviewBackgroundCollectNotRetriedAfterFault(t *testing.T) {
	s := openSQLite(t, t.TempDir())
	t.Cleanup(func() { _ = s.Close() })
	// writes: 1 Register a, 2 Register b, 3 Send, 4 the background Collect (fails), 5... a retry.
	d := &failingDriver{Driver: s.ExchangeDriver(), fail: map[int64]bool{4: true}}
	e := exchangedb.New(d, []exchange.Option{exchange.WithBackgroundCollection(true)})
	t.Cleanup(func() { _ = e.Close() })
	a, b := uuid.New(), uuid.New()
	register(t, e, a, b)
	send(t, e, a, envelope.IDParticipant(b), "hello")
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		page, err := e.ReceivePage(tctx(t), b, nil, exchange.Cursor{}, 0)
		if err == nil && len(page.Messages) == 1 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("after one failed background collect, the message is still undelivered 5 s later (writes made: %d)", d.n.Load())
}

// Review R2b: the background collector only collects owners that sent through its own replica
// (and, once, those queued at its start). A Send acknowledged by replica B whose own collector
// never ran (B killed right after the ack; modelled by B without one) is never collected by A's.
func TestReviewBackgroundCollectorIgnoresOtherReplicasMail(t *testing.T) {
	url := pgtest.New(t)
	sa, sb := openPostgres(t, url), openPostgres(t, url)
	t.Cleanup(func() { _ = sa.Close(); _ = sb.Close() })
	// A short sweep, so the test waits well under its deadline (DefaultCollectSweep is 10 s).
	ra := exchangedb.New(sa.ExchangeDriver(), []exchange.Option{exchange.WithBackgroundCollection(true)}, exchangedb.WithCollectSweep(200*time.Millisecond))
	t.Cleanup(func() { _ = ra.Close() })
	rb := exchangedb.New(sb.ExchangeDriver(), nil) // B "crashed" before its collector ran
	t.Cleanup(func() { _ = rb.Close() })
	a, b := uuid.New(), uuid.New()
	register(t, ra, a, b)
	send(t, rb, a, envelope.IDParticipant(b), "via B")
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		page, err := ra.ReceivePage(tctx(t), b, nil, exchange.Cursor{}, 0)
		if err == nil && len(page.Messages) == 1 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("A's background collector never collected mail acknowledged by B: it stays in the outbox")
}

// flakyReads fails the first dispatch read (the subscription feed) after a write committed.
type flakyReads struct {
	exchangedb.Driver
	armed atomic.Bool
}

func (d *flakyReads) Write(ctx context.Context, fn func(context.Context, exchangedb.Querier) error, after func()) error {
	return d.Driver.Write(ctx, fn, func() {
		d.armed.Store(true)
		if after != nil {
			after()
		}
	})
}

func (d *flakyReads) Read(ctx context.Context, fn func(context.Context, exchangedb.Querier) error) error {
	return d.Driver.Read(ctx, func(ctx context.Context, q exchangedb.Querier) error {
		return fn(ctx, flakyQuerier{q, d})
	})
}

type flakyQuerier struct {
	exchangedb.Querier
	d *flakyReads
}

func (q flakyQuerier) Query(ctx context.Context, query string, args ...any) (exchangedb.Rows, error) {
	if strings.Contains(query, "l.holder_reg = ?") && q.d.armed.CompareAndSwap(true, false) {
		return nil, store.ErrStorageUnavailable
	}
	return q.Querier.Query(ctx, query, args...)
}

// Review R3: on SQLite (Listen reports no replicas, so no periodic recheck) a dispatch that fails
// once re-marks the owner pending but nothing kicks the dispatcher again: the live subscription
// misses the delivery until some other wake-up happens (subscribe.go run()).
func TestReviewSQLiteDispatchFaultStallsSubscription(t *testing.T) {
	s := openSQLite(t, t.TempDir())
	t.Cleanup(func() { _ = s.Close() })
	d := &flakyReads{Driver: s.ExchangeDriver()}
	e := exchangedb.New(d, nil)
	t.Cleanup(func() { _ = e.Close() })
	ctx := tctx(t)
	a, b := uuid.New(), uuid.New()
	register(t, e, a, b)
	d.armed.Store(false)
	sub, unsubscribe, err := e.Subscribe(ctx, b, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()
	send(t, e, a, envelope.IDParticipant(b), "live")
	d.armed.Store(false)
	if _, err := e.Collect(ctx, a, exchange.ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Events():
	case <-sub.Done():
		t.Fatalf("ended: %v", sub.Err())
	case <-time.After(5 * time.Second):
		t.Fatal("one failed dispatch read: the subscription never got the delivery (no retry without a recheck tick)")
	}
}

// Review R9: the sqlite driver prepares a read statement on first use with db.read.PrepareContext
// while its caller already holds a read connection (inside d.s.read) and while holding c.mu. With
// --sqlite-readers 1 (allowed: 1 to 64) the first Exchange read waits for a connection it holds
// itself; with N readers, N concurrent first reads deadlock on the pool and c.mu.
func TestReviewSQLiteOneReaderFirstReadDeadlocks(t *testing.T) {
	s, err := sqlite.OpenStore(context.Background(), sqlite.StoreConfig{Config: sqlite.Config{Dir: t.TempDir(), CacheKiB: 1024, Readers: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	e := exchangedb.New(s.ExchangeDriver(), nil)
	t.Cleanup(func() { _ = e.Close() })
	a := uuid.New()
	register(t, e, a)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, ok, err := e.Get(ctx, a); err != nil || !ok {
		t.Fatalf("Get with --sqlite-readers 1 = %v, %v", ok, err)
	}
}

// Review R4: advisory locks belong to the database, not the schema. Two deployments in two
// schemas of one database, with an owner of the same id: a collect in schema A holding the
// owner's collect lock must not stall the collect in schema B.
func TestReviewCollectLockIsPerSchema(t *testing.T) {
	urlA, urlB := pgtest.New(t), pgtest.New(t)
	sa, sb := openPostgres(t, urlA), openPostgres(t, urlB)
	t.Cleanup(func() { _ = sa.Close(); _ = sb.Close() })
	ea, eb := exchangedb.New(sa.ExchangeDriver(), nil), exchangedb.New(sb.ExchangeDriver(), nil)
	t.Cleanup(func() { _ = ea.Close(); _ = eb.Close() })
	ctx := tctx(t)
	o := uuid.New()
	register(t, ea, o)
	register(t, eb, o)
	send(t, ea, o, envelope.IDParticipant(o), "in A")
	send(t, eb, o, envelope.IDParticipant(o), "in B")

	// A session of schema A holds o's owner row, so A's Collect takes o's collect lock and waits.
	conn, tx := sessionTx(t, ctx, urlA)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM exchange_owners WHERE owner = $1 FOR UPDATE`, o.String()); err != nil {
		t.Fatal(err)
	}
	collected := make(chan error, 1)
	go func() {
		_, err := ea.Collect(ctx, o, exchange.ReportOptions{})
		collected <- err
	}()
	waitBlockedBy(t, ctx, conn, tx, "A's Collect to hold o's collect lock and wait for the owner row")
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	_, errB := eb.Collect(bctx, o, exchange.ReportOptions{})
	cancel()
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-collected; err != nil {
		t.Fatalf("Collect in A: %v", err)
	}
	if errB != nil {
		t.Fatalf("Collect in schema B waited for schema A's collect lock: %v", errB)
	}
}

// listenSpy records the owners each wake-up from other replicas names.
type listenSpy struct {
	exchangedb.Driver
	mu   sync.Mutex
	seen map[uuid.UUID]bool
}

func (d *listenSpy) Listen(fn func([]uuid.UUID)) bool {
	return d.Driver.Listen(func(owners []uuid.UUID) {
		d.mu.Lock()
		for _, o := range owners {
			d.seen[o] = true
		}
		d.mu.Unlock()
		fn(owners)
	})
}

func (d *listenSpy) saw(o uuid.UUID) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen[o]
}

// Review R4: NOTIFY channels belong to the database too: a wake-up from schema A must not reach
// the listeners of schema B. PostgreSQL delivers notifications in commit order, so once B has
// heard of a later delivery in its own schema, it has heard every earlier one it ever will.
func TestReviewWakeUpsStayInTheirSchema(t *testing.T) {
	urlA, urlB := pgtest.New(t), pgtest.New(t)
	sa, sb, sb2 := openPostgres(t, urlA), openPostgres(t, urlB), openPostgres(t, urlB)
	t.Cleanup(func() { _ = sa.Close(); _ = sb.Close(); _ = sb2.Close() })
	spyA := &listenSpy{Driver: sa.ExchangeDriver(), seen: map[uuid.UUID]bool{}}
	spyB := &listenSpy{Driver: sb.ExchangeDriver(), seen: map[uuid.UUID]bool{}}
	ea, eb, eb2 := exchangedb.New(spyA, nil), exchangedb.New(spyB, nil), exchangedb.New(sb2.ExchangeDriver(), nil)
	t.Cleanup(func() { _ = ea.Close(); _ = eb.Close(); _ = eb2.Close() })
	ctx := tctx(t)
	o, p := uuid.New(), uuid.New()
	register(t, ea, o)
	register(t, eb2, p)
	send(t, ea, o, envelope.IDParticipant(o), "in A")
	if _, err := ea.Collect(ctx, o, exchange.ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "A's own listener to hear of o (the notification committed)", func() bool { return spyA.saw(o) })
	send(t, eb2, p, envelope.IDParticipant(p), "in B")
	if _, err := eb2.Collect(ctx, p, exchange.ReportOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "B's listener to hear of p (schema B's own wake-up)", func() bool { return spyB.saw(p) })
	if spyB.saw(o) {
		t.Fatal("schema B's listener was woken for owner o of schema A")
	}
}

// Review R10: concurrent Sends of one sender with distinct request ids numbered their records
// "MAX(n) + 1" without a lock: two could share a number, and the window of the sender's last
// RequestsPerSender ids was approximate. Every record must have its own number.
func TestReviewRequestNumbersAreDistinct(t *testing.T) {
	ra, rb, spies := twoReplicas(t)
	ctx := tctx(t)
	a := uuid.New()
	register(t, ra, a)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			x := []*exchangedb.Engine{ra, rb}[g%2]
			for range 15 {
				if _, err := x.Send(ctx, exchange.SendRequest{Sender: a, Recipient: envelope.IDParticipant(a), Content: jsonv.StringValue("x"), RequestID: uuid.NewString()}); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	var rows, distinct int
	err := spies[0].Read(ctx, func(ctx context.Context, q exchangedb.Querier) error {
		return q.QueryRow(ctx, `SELECT count(*), count(DISTINCT n) FROM exchange_requests WHERE sender = ?`, a.String()).Scan(&rows, &distinct)
	})
	if err != nil {
		t.Fatal(err)
	}
	if rows != 90 || distinct != rows {
		t.Fatalf("%d request records, %d distinct numbers; want 90 and 90", rows, distinct)
	}
}

// Review R10: a stored message that does not decode is damaged storage (DATA_LOSS at the server,
// as history's damaged rows are), not a plain error the server answers INTERNAL.
func TestReviewUndecodableRowIsStorageDamaged(t *testing.T) {
	for _, c := range []struct {
		name string
		open func(t *testing.T) exchangedb.Driver
	}{
		{"sqlite", func(t *testing.T) exchangedb.Driver {
			s := openSQLite(t, t.TempDir())
			t.Cleanup(func() { _ = s.Close() })
			return s.ExchangeDriver()
		}},
		{"postgres", func(t *testing.T) exchangedb.Driver {
			s := openPostgres(t, pgtest.New(t))
			t.Cleanup(func() { _ = s.Close() })
			return s.ExchangeDriver()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := c.open(t)
			e := exchangedb.New(d, nil)
			t.Cleanup(func() { _ = e.Close() })
			ctx := tctx(t)
			a, b := uuid.New(), uuid.New()
			register(t, e, a, b)
			send(t, e, a, envelope.IDParticipant(b), "soon damaged")
			if _, err := e.Collect(ctx, a, exchange.ReportOptions{}); err != nil {
				t.Fatal(err)
			}
			err := d.Write(ctx, func(ctx context.Context, q exchangedb.Querier) error {
				_, err := q.Exec(ctx, `UPDATE exchange_messages SET body = '{not json' WHERE sender = ?`, a.String())
				return err
			}, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.ReceivePage(ctx, b, nil, exchange.Cursor{}, 0)
			if !errors.Is(err, store.ErrStorageDamaged) {
				t.Fatalf("ReceivePage over an undecodable row = %v, want store.ErrStorageDamaged", err)
			}
			if _, _, err := e.PopIf(ctx, b, a, nil); !errors.Is(err, store.ErrStorageDamaged) {
				t.Fatalf("Pop of an undecodable row = %v, want store.ErrStorageDamaged", err)
			}
		})
	}
}

// Review R10: the background collector's collects ran under context.Background with a 30 s
// timeout, so Close waited for a collect stuck on a lock for up to 30 s. Close cancels them now.
func TestReviewCloseDoesNotWaitOutABackgroundCollect(t *testing.T) {
	url, e := postgresEngine(t, []exchange.Option{exchange.WithBackgroundCollection(true)})
	ctx := tctx(t)
	a, b := uuid.New(), uuid.New()
	register(t, e, a, b)

	// A session holds the recipient's owner row: the background collect of a waits for it.
	conn, tx := sessionTx(t, ctx, url)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM exchange_owners WHERE owner = $1 FOR UPDATE`, b.String()); err != nil {
		t.Fatal(err)
	}
	send(t, e, a, envelope.IDParticipant(b), "held up")
	waitBlockedBy(t, ctx, conn, tx, "the background collect to wait for b's row")
	closed := make(chan struct{})
	go func() {
		_ = e.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Error("Close still waits for the background collect after 10 s")
		_ = tx.Rollback(ctx)
		<-closed
	}
}
