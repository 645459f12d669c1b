package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlrow"
)

// StoreConfig configures a Store: where its database is and the store's
// bounds, which mean what they mean for store.Memory.
type StoreConfig struct {
	Config
	// EventRetention is how many events each branch's log keeps (0:
	// store.DefaultEventRetention).
	EventRetention int
	// RequestTTL and RequestMax are the idempotency window (0: the
	// store.DefaultRequest* values).
	RequestTTL time.Duration
	RequestMax int
	// SubscriberBuffer is the default subscription buffer in commits,
	// SubscriberBufferBytes in bytes of commits, and MaxSubscriptions the
	// limit of open subscriptions (0: store defaults; MaxSubscriptions < 0:
	// no limit).
	SubscriberBuffer      int
	SubscriberBufferBytes int64
	MaxSubscriptions      int
	// Clock is the idempotency window's clock (nil: time.Now).
	Clock func() time.Time
	// ProbeInterval is how often an unusable database is probed (0:
	// DefaultProbeInterval; health.go).
	ProbeInterval time.Duration

	// failCommit, when set, fails commits with its error (fault
	// injection: this package's tests and testhook_on.go).
	failCommit func() error
	// freeSpace, when set, replaces the statfs of the data directory that
	// a backup checks its room against (backup.go; this package's tests).
	freeSpace func(dir string) (int64, error)
	// walSchedule, when set, replaces the WAL sizes the writer checkpoints
	// at (checkpoint.go; this package's tests, to bound a smaller WAL).
	walSchedule walSchedule
}

// Store is the durable store.Store over one SQLite database (issue 14).
//
// Every write runs on the writer goroutine (writer.go), inside a batch's
// transaction, through the engine-neutral rules of internal/store
// (rules.go): the branch's row and messages are read inside that
// transaction (txState), the plan applied to the rows, and the commit
// published to the branch's subscribers after the transaction commits, in
// commit order. Reads run on a pool of read connections, each in one read
// transaction, so a read sees one committed state; a write acknowledged
// has committed, so every read after it sees it. Nothing is replayed into
// memory at start: what memory holds is the branches being watched or
// observed (handles.go), SQLite's page caches, and the prepared
// statements.
type Store struct {
	db  *DB
	w   *writer
	cfg StoreConfig

	wst, rst stmtCache
	ex       exchangeStmts // the Exchange's (exchange_driver.go)

	mu      sync.Mutex
	handles map[uuid.UUID]*handle // the branches with subscribers or observers; see handles.go

	// rows caches branch rows for the writer, which alone changes them
	// (writer goroutine only): a write reads its branch's row from here,
	// not from the database, and puts the row it wrote back once its
	// write succeeded; a failed commit empties it.
	rows map[uuid.UUID]*sqlrow.Branch
	// pinning counts the handles being made in the batch being written
	// (writer goroutine only): a job of pin has read the branch, its after
	// function has not yet made the handle; a failed commit empties it.
	pinning map[uuid.UUID]int
	// requests is the writer's bookkeeping of the idempotency records
	// (requests.go; writer goroutine only); a failed commit empties it.
	requests requestBook

	health *health // whether the database is usable (health.go)

	subsOpen atomic.Int64
	closed   atomic.Bool

	backup sync.Mutex // held by the one Backup that may run (backup.go), and by Close for good

	// The janitor deletes the event logs of deleted branches once no
	// subscription reads them (handles.go), and the prober probes an
	// unusable database (health.go); both stop at Close, and janitor
	// counts both.
	sweeps  chan uuid.UUID
	stop    chan struct{}
	janitor sync.WaitGroup
}

var _ store.Store = (*Store)(nil)

// OpenStore opens (creating and migrating it as Config says) the database
// in cfg.Dir and returns the store over it. It fails with a *LockError when
// another process holds the directory, and with a
// *migrations.VersionError when the schema is newer than this server.
func OpenStore(ctx context.Context, cfg StoreConfig) (*Store, error) {
	if cfg.EventRetention <= 0 {
		cfg.EventRetention = store.DefaultEventRetention
	}
	if cfg.RequestTTL <= 0 {
		cfg.RequestTTL = store.DefaultRequestTTL
	}
	if cfg.RequestMax <= 0 {
		cfg.RequestMax = store.DefaultRequestMax
	}
	if cfg.SubscriberBuffer <= 0 {
		cfg.SubscriberBuffer = store.DefaultSubscriberBuffer
	}
	switch {
	case cfg.MaxSubscriptions == 0:
		cfg.MaxSubscriptions = store.DefaultMaxSubscriptions
	case cfg.MaxSubscriptions < 0:
		cfg.MaxSubscriptions = 0
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	if cfg.failCommit == nil {
		cfg.failCommit = commitFault()
	}
	if cfg.ProbeInterval <= 0 {
		cfg.ProbeInterval = DefaultProbeInterval
	}
	if cfg.freeSpace == nil {
		cfg.freeSpace = statfsFree
	}
	db, err := Open(ctx, cfg.Config)
	if err != nil {
		return nil, err
	}
	// This process holds the directory's lock, so a backup's temporary
	// copy there is one a crash left behind (backup.go).
	if err := removeBackups(filepath.Dir(db.Path)); err != nil {
		db.Close()
		return nil, err
	}
	s := &Store{
		db: db, cfg: cfg,
		wst: stmtCache{db: db.write, perTx: true}, rst: stmtCache{db: db.read},
		handles: map[uuid.UUID]*handle{},
		health:  newHealth(),
		sweeps:  make(chan uuid.UUID, 1024),
		stop:    make(chan struct{}),
	}
	err = s.wst.warm(ctx, false)
	if err == nil {
		err = s.rst.warm(ctx, true)
	}
	if err == nil {
		err = s.sweepOrphans(ctx)
	}
	if err != nil {
		s.wst.close()
		s.rst.close()
		db.Close()
		return nil, err
	}
	s.rows, s.pinning = map[uuid.UUID]*sqlrow.Branch{}, map[uuid.UUID]int{}
	s.requests = requestBook{last: map[string]int64{}}
	if s.w, err = newWriter(ctx, db, 0, checkpointHooks{pages: cfg.walSchedule}); err != nil {
		s.wst.close()
		s.rst.close()
		db.Close()
		return nil, err
	}
	s.w.onAbort = func() { clear(s.rows); clear(s.pinning); s.requests.reset() }
	s.w.onCommit = func() { s.health.set(nil) } // a commit clears an I/O error, never damage (health.go)
	s.w.fault = s.fault
	s.w.failCommit = cfg.failCommit
	s.janitor.Add(2)
	go s.runJanitor()
	go s.runProber(cfg.ProbeInterval)
	return s, nil
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.db.Path }

// OverMaxBytes is DB.OverMaxBytes of the store's database.
func (s *Store) OverMaxBytes() (size, limit int64) { return s.db.OverMaxBytes() }

// Close stops the writer (after the batch in progress) and the janitor,
// cancels a running backup and waits for it to remove its temporary copy,
// then closes the database; it is safe to call more than once. Calls made
// after it fail with ErrClosed.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.w.close()
	close(s.stop)
	s.janitor.Wait()
	s.backup.Lock() // never unlocked: a Backup after Close fails with ErrClosed
	return errors.Join(s.wst.close(), s.rst.close(), s.db.Close())
}

// Stats returns what the metrics read: the branches and messages the
// database holds, and the open subscriptions. MemoryUsed and MemoryBudget
// are 0: this engine keeps its data on disk.
func (s *Store) Stats() store.Stats {
	var st store.Stats
	ctx := context.Background()
	var msgs sql.NullInt64
	if err := s.rst.queryRow(ctx, nil, qCounts).Scan(&st.Branches, &msgs); err == nil {
		st.Messages = int(msgs.Int64)
	}
	s.mu.Lock()
	hs := make([]*handle, 0, len(s.handles))
	for _, h := range s.handles {
		hs = append(hs, h)
	}
	s.mu.Unlock()
	for _, h := range hs {
		h.mu.RLock()
		st.Watchers += h.feed.Watchers()
		h.mu.RUnlock()
	}
	return st
}

// Writes returns the number of write transactions committed and of
// writes they held (group commit: writes/commits is the batch size).
func (s *Store) Writes() (commits, writes int64) { return s.w.commits.Load(), s.w.writes.Load() }

// WALPages is how many pages the writer has written to the WAL since Open (benchmarks: the pages
// a write dirties, which its commit writes and a checkpoint copies back).
func (s *Store) WALPages() int64 { return s.w.storage.walFrames.Load() }

func (s *Store) now() time.Time { return s.cfg.Clock() }

// stmtCache prepares each query once per database handle; a transaction
// uses it through tx.StmtContext, which reuses the statement prepared on
// the transaction's connection (re-preparing every statement of every
// write cost more than the write).
type stmtCache struct {
	db *sql.DB
	mu sync.Mutex
	m  map[string]*sql.Stmt

	// perTx keeps, for the write side, the statements bound to the writer's
	// current transaction, so a batch binds each statement once, not once
	// per use (writer goroutine only).
	perTx bool
	tx    *sql.Tx
	txm   map[string]*sql.Stmt
	// writes counts the statements exec has run on the write side, failed
	// ones too (writer goroutine only): a write that failed with it
	// unchanged wrote nothing (writeAsync).
	writes uint64
}

// warm prepares every query (only the reads for a read-only pool), before
// any transaction holds a connection.
func (c *stmtCache) warm(ctx context.Context, readOnly bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = make(map[string]*sql.Stmt, len(queries))
	for _, q := range queries {
		if readOnly && !strings.HasPrefix(q, "SELECT") {
			continue
		}
		st, err := c.db.PrepareContext(ctx, q)
		if err != nil {
			return fmt.Errorf("sqlite: prepare %q: %w", q, err)
		}
		c.m[q] = st
	}
	return nil
}

func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[query]
}

func (c *stmtCache) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var errs []error
	for _, st := range c.m {
		errs = append(errs, st.Close())
	}
	c.m = nil
	return errors.Join(errs...)
}

// errWriteOutsideWriter is a write statement used outside the writer's
// transaction: a bug.
var errWriteOutsideWriter = errors.New("sqlite: a write statement outside the writer's transaction")

// stmt returns query's statement, within tx when tx is not nil. A query
// that was not warmed (none should be) is prepared for this use only.
func (c *stmtCache) stmt(ctx context.Context, tx *sql.Tx, query string) (*sql.Stmt, error) {
	st := c.get(query)
	switch {
	case tx == nil && c.perTx:
		// On the write pool it would wait forever for the connection the
		// writer holds.
		return nil, errWriteOutsideWriter
	case st == nil && tx != nil:
		return tx.PrepareContext(ctx, query)
	case st == nil:
		return c.db.PrepareContext(ctx, query)
	case tx == nil:
		return st, nil
	case !c.perTx:
		return tx.StmtContext(ctx, st), nil
	}
	if c.tx != tx {
		c.tx, c.txm = tx, map[string]*sql.Stmt{}
	}
	if bound, ok := c.txm[query]; ok {
		return bound, nil
	}
	bound := tx.StmtContext(context.Background(), st) // kept for the batch: never bound to one caller's context
	c.txm[query] = bound
	return bound, nil
}

func (c *stmtCache) exec(ctx context.Context, tx *sql.Tx, query string, args ...any) (sql.Result, error) {
	st, err := c.stmt(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	if c.perTx {
		c.writes++
	}
	return st.ExecContext(ctx, args...)
}

func (c *stmtCache) query(ctx context.Context, tx *sql.Tx, query string, args ...any) (*sql.Rows, error) {
	st, err := c.stmt(ctx, tx, query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(ctx, args...)
}

// errRow is a *sql.Row stand-in for a statement that could not be prepared.
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

type scanner interface{ Scan(...any) error }

func (c *stmtCache) queryRow(ctx context.Context, tx *sql.Tx, query string, args ...any) scanner {
	st, err := c.stmt(ctx, tx, query)
	if err != nil {
		return errRow{err}
	}
	return st.QueryRowContext(ctx, args...)
}

// read runs fn in one read transaction: every query it makes sees the
// same committed state. Its connection's page cache counts are taken
// after (countReads).
func (s *Store) read(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.closed.Load() {
		return ErrClosed
	}
	conn, err := s.db.read.Conn(ctx)
	if err != nil {
		return s.fault(fmt.Errorf("sqlite: begin read: %w", err))
	}
	defer s.db.countReads(conn)
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return s.fault(fmt.Errorf("sqlite: begin read: %w", err))
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to keep
	return s.fault(fn(tx))
}
