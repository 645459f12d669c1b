package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/historyd/historyd/internal/store"
)

// DefaultMaxConns is the pool's size by default: PostgreSQL allows 100
// connections by default and several replicas share them (issue 16).
const DefaultMaxConns = 10

// DefaultSweepInterval is how often a replica with watched branches reads
// their heads, to make up for a lost wake-up (wake.go).
const DefaultSweepInterval = 2 * time.Second

// Config configures a Store.
type Config struct {
	// URL is a libpq URL or DSN (pgxpool.ParseConfig).
	URL string
	// MaxConns is the pool's size (0: DefaultMaxConns). Each Store holds
	// one more connection of its own, the LISTEN connection.
	MaxConns int32
	// StatementTimeout, when set, is the sessions' statement_timeout.
	StatementTimeout time.Duration
	// NoAutoMigrate refuses a database with pending migrations
	// (*migrations.PendingError) instead of applying them.
	NoAutoMigrate bool
	// OnMigrationLockWait, when set, is called before the Store waits for
	// the schema's migration lock another session holds (another replica
	// or `historyd migrate`): the wait is up to migrations.LockWait, and a
	// replica that says nothing meanwhile looks hung. It may be called
	// again each time the Store connects (a server unreachable at start).
	OnMigrationLockWait func(LockHolder)
	// EventRetention, RequestTTL, RequestMax, SubscriberBuffer,
	// SubscriberBufferBytes, MaxSubscriptions and Clock mean what
	// sqlite.StoreConfig's do.
	EventRetention        int
	RequestTTL            time.Duration
	RequestMax            int
	SubscriberBuffer      int
	SubscriberBufferBytes int64
	MaxSubscriptions      int
	Clock                 func() time.Time
	// SweepInterval is how often the lost-wake-up sweep runs while the
	// Store has watched branches (0: DefaultSweepInterval).
	SweepInterval time.Duration
	// GroupWorkers is how many group-commit transactions run at once
	// (group.go), each on a connection of the pool: 0 is groupWorkers, or
	// half the pool when that is smaller; a negative value turns group
	// commit off (every write its own transaction).
	GroupWorkers int
}

// Store is the PostgreSQL store.Store (issue 16). It is safe for
// concurrent use, and so are several Stores, in as many processes, over
// one database: every write is one transaction that locks its branch's
// row; nothing read is cached across calls.
type Store struct {
	cfg    Config
	pool   *pgxpool.Pool
	conn   *pgx.ConnConfig // the listener's
	target string

	ready  atomic.Bool // connected and migrated: calls may run
	health *health

	// handles holds the branches with subscribers or observers here
	// (uuid.UUID -> *handle, handles.go): read without a lock, since a
	// write's transaction looks its branch up (sweepBelow); mu orders its
	// changes with the handles' pins.
	mu      sync.Mutex
	handles sync.Map

	// hookBeforeLock, a test hook, runs in withHandle before it locks the
	// handle (a race with Close is forced there).
	hookBeforeLock func()

	subsOpen atomic.Int64
	closed   atomic.Bool

	// exWrites counts this process's committed Exchange writes; analyzeNow asks the analyser
	// to analyse the Exchange tables still without statistics (analyze.go).
	exWrites   atomic.Int64
	analyzeNow chan struct{}
	// hookAnalyzed, a test hook, runs after each run of the analyser with what it analysed.
	hookAnalyzed func(tables []string, err error)

	wake *wake // the cross-replica wake-ups (wake.go)

	group *group // group commit (group.go); nil when off
	// hookGroup, a test hook, runs at the end of a group's transaction,
	// before its COMMIT; its error fails the group.
	hookGroup func(ws []*branchWrite) error
	// hookTaken, a test hook, runs when a worker has taken a group, before
	// it runs it.
	hookTaken func(ws []*branchWrite)

	// stop ends every goroutine of the Store (connector, notifier,
	// listener, puller, sweeper, janitor, prober, analyser); wg waits for them.
	ctx  context.Context
	stop context.CancelFunc
	wg   sync.WaitGroup
}

var _ store.Store = (*Store)(nil)

// Open returns the store over the database at cfg.URL, migrated (or
// checked, with NoAutoMigrate). A URL that does not parse, a schema newer
// than this server (*migrations.VersionError) and pending migrations with
// NoAutoMigrate (*migrations.PendingError) fail at once. An unreachable
// server does not: the Store keeps connecting (then migrating) in the
// background with backoff until it succeeds or Close, and until then every
// call fails with store.ErrStorageUnavailable and Health reports why.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("postgres: the URL does not parse: %w", err)
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	pcfg.MaxConns = cfg.MaxConns
	if cfg.StatementTimeout > 0 {
		pcfg.ConnConfig.RuntimeParams["statement_timeout"] = strconv.FormatInt(cfg.StatementTimeout.Milliseconds(), 10)
	}
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
	if cfg.SweepInterval <= 0 {
		cfg.SweepInterval = DefaultSweepInterval
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg) // connects lazily
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	s := &Store{
		cfg: cfg, pool: pool, conn: pcfg.ConnConfig.Copy(), target: target(pcfg.ConnConfig),
		analyzeNow: make(chan struct{}, 1),
	}
	s.health = newHealth()
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.wake = newWake()
	err = s.connect(ctx)
	switch {
	case err == nil:
	case ctx.Err() != nil:
		s.stop()
		pool.Close()
		return nil, ctx.Err()
	case connectionClass(err):
		s.health.set(s.unreachable(err))
		s.wg.Add(1)
		go s.runConnector()
	default:
		s.stop()
		pool.Close()
		return nil, err
	}
	if n := groupWorkerCount(cfg); n > 0 {
		s.group = newGroup(groupMax)
		s.wg.Add(n)
		for range n {
			go s.runGroupWorker()
		}
	}
	s.wg.Add(7)
	go s.runAnalyzer()
	go s.runNotifier()
	go s.runListener()
	go s.runPuller()
	go s.runSweeper()
	go s.runJanitor()
	go s.runProber()
	return s, nil
}

// target names the database for log lines: host:port/dbname, no password.
func target(c *pgx.ConnConfig) string {
	return fmt.Sprintf("%s:%d/%s", c.Host, c.Port, c.Database)
}

// Target returns host:port/dbname (no password), for log lines.
func (s *Store) Target() string { return s.target }

// connectTimeout bounds reaching the server (the ping), never the
// migration after it (issue 16 review 5: a replica waits for another's
// migration lock up to 5 minutes by design, and a migration may be long).
// A var: tests lower it.
var connectTimeout = 10 * time.Second

// connect reaches the server and migrates (or checks) its schema; then
// the Store is ready.
func (s *Store) connect(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	err := s.pool.Ping(pctx)
	cancel()
	if err != nil {
		return err
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	s.ready.Store(true)
	s.health.set(nil)
	return nil
}

// runConnector retries connect with exponential backoff (100 ms doubling
// to 5 s) until it succeeds, the schema is refused, or Close. Owner: the
// Store; stopped by Close.
func (s *Store) runConnector() {
	defer s.wg.Done()
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 5*time.Second) {
		t := time.NewTimer(wait)
		select {
		case <-s.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		err := s.connect(s.ctx)
		switch {
		case err == nil, s.ctx.Err() != nil:
			return
		case connectionClass(err):
			s.health.set(s.unreachable(err))
		default:
			// A schema this server cannot serve: no retry mends it.
			s.health.refuse(&StorageError{Target: s.target, Err: store.ErrStorageUnavailable, Cause: err, Refused: true})
			return
		}
	}
}

// Close ends this replica's subscriptions (store.ErrClosed: their readers
// would otherwise read a closed pool), stops the Store's goroutines and
// closes its connections; it is safe to call more than once. Calls made
// after it fail with store.ErrClosed.
func (s *Store) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	s.endAll(store.ErrClosed)
	s.stop()
	s.wg.Wait()
	s.pool.Close()
	return nil
}

// Stats returns the branches and messages the database holds, and this
// replica's open subscriptions; no memory figures (the data is on the
// server).
func (s *Store) Stats() store.Stats {
	var st store.Stats
	if s.ready.Load() && !s.closed.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		var msgs int64
		if err := s.pool.QueryRow(ctx, qCounts).Scan(&st.Branches, &msgs); err == nil {
			st.Messages = int(msgs)
		}
		cancel()
	}
	for _, h := range s.allHandles() {
		h.mu.RLock()
		st.Watchers += h.feed.Watchers()
		h.mu.RUnlock()
	}
	return st
}

func (s *Store) now() time.Time { return s.cfg.Clock() }

// usable fails a call while the Store is not ready or closed.
func (s *Store) usable() error {
	switch {
	case s.closed.Load():
		return store.ErrClosed
	case !s.ready.Load():
		_, err := s.health.get()
		if err == nil {
			err = s.unreachable(errors.New("not connected yet"))
		}
		return err
	}
	return nil
}

// retryable reports an error after which a transaction is run again from
// the start: a deadlock PostgreSQL broke, or a serialization failure.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// inTx runs fn in one READ COMMITTED transaction and commits it; fn starts
// afresh on a retry (a deadlock PostgreSQL broke). Its error is sorted by
// fault.
func (s *Store) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.runTx(ctx, pgx.TxOptions{}, fn)
}

// read runs fn in one REPEATABLE READ READ ONLY transaction: every query
// sees the same committed state.
func (s *Store) read(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return s.runTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

func (s *Store) runTx(ctx context.Context, opts pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	if err := s.usable(); err != nil {
		return err
	}
	var err error
	for attempt := 0; attempt < 5; attempt++ {
		if err = s.tryTx(ctx, opts, fn); !retryable(err) {
			break
		}
	}
	return s.fault(ctx, err)
}

// tryTx runs fn in a lazyTx (tx.go): BEGIN rides with fn's first batch,
// and the statements fn hands to the commit (commitWith) ride with COMMIT.
func (s *Store) tryTx(ctx context.Context, opts pgx.TxOptions, fn func(tx pgx.Tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	tx := newLazyTx(conn, opts)
	defer func() {
		// A panic in fn: the transaction is rolled back and its connection
		// released before the panic goes on, so no row lock outlives it
		// (a recovered panic would otherwise hold them until the process
		// ends, and Close would wait for the connection forever).
		if p := recover(); p != nil {
			rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			tx.Rollback(rbCtx) //nolint:errcheck // the panic is what to report
			cancel()
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		rbCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		tx.Rollback(rbCtx) //nolint:errcheck // the error that ended fn is the one to report
		cancel()
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return err // the server refused a statement or the COMMIT: nothing was applied
		}
		return commitError{err}
	}
	return nil
}

// commitWith hands b's statements to tx's COMMIT, to be sent with it in
// one batch (a lazyTx), or sends them now (any other pgx.Tx).
func commitWith(ctx context.Context, tx pgx.Tx, b *pgx.Batch) error {
	if b.Len() == 0 {
		return nil
	}
	if lt, ok := tx.(*lazyTx); ok {
		lt.commitWith(b)
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}
