package postgres

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/historyd/historyd/internal/store/migrations"
)

// MigrateOption changes how Migrate runs.
type MigrateOption func(*migrateOptions)

type migrateOptions struct {
	onLockWait func(LockHolder)
}

// LockHolder is the session that holds the migration lock Migrate waits
// for, as pg_stat_activity shows it.
type LockHolder struct {
	PID         int
	Application string    // its application_name; "" when it set none
	Client      string    // its client address; "local" for a Unix socket; "" when not shown to this role
	Since       time.Time // when its session started; zero when not shown to this role
}

// OnLockWait has Migrate call f, before it waits, when another session
// holds the schema's migration lock (another replica or `historyd migrate`
// migrating it): Migrate then waits for it up to migrations.LockWait, and
// a command that says nothing meanwhile looks hung.
func OnLockWait(f func(LockHolder)) MigrateOption {
	return func(o *migrateOptions) { o.onLockWait = f }
}

// Migrate applies the pending migrations to the database at url (historyd
// migrate --store postgres) and returns the versions it applied. It holds
// goose's session advisory lock while it does, so replicas starting
// together migrate once. Reaching the server is bounded as Open's is
// (connectTimeout): a server that accepts the connection and never
// answers fails it, where Migrate used to wait forever.
func Migrate(ctx context.Context, url string, opts ...MigrateOption) (applied []int64, err error) {
	var o migrateOptions
	for _, opt := range opts {
		opt(&o)
	}
	pool, err := migrationPool(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	if err := ping(ctx, pool); err != nil {
		return nil, err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return up(ctx, pool, db, o.onLockWait)
}

// lockWaitNotice is how long up waits for the migration lock before it
// asks who holds it. Every start takes the lock, if only to read the
// schema's version, so replicas starting together each hold it for a
// moment: a holder seen at once is usually that, not a migration. A var:
// tests lower it.
var lockWaitNotice = 2 * time.Second

// migrationApp is the application_name of this process's migration
// sessions: it names them to an operator reading pg_stat_activity (or
// another replica's warning), and tells lockHolder this process's own
// session, which holds the lock while it migrates, from another's.
var migrationApp = func() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "historyd migrations " + hex.EncodeToString(b[:])
}()

// hookBeforeUp, a test hook, runs in up once the wait's notice is armed,
// before the lock is first tried.
var hookBeforeUp func()

// up applies the pending migrations holding the schema's migration lock.
// When it has waited lockWaitNotice and another session holds the lock,
// onLockWait (if set) hears who, once.
func up(ctx context.Context, pool *pgxpool.Pool, db *sql.DB, onLockWait func(LockHolder)) ([]int64, error) {
	id, err := lockID(ctx, pool)
	if err != nil {
		return nil, err
	}
	if onLockWait != nil {
		// Owner: this call; stopped when Up returns (done), and waited for.
		nctx, done := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Go(func() {
			t := time.NewTimer(lockWaitNotice)
			defer t.Stop()
			select {
			case <-nctx.Done():
				return
			case <-t.C:
			}
			if holder, held, err := lockHolder(nctx, pool, id); err == nil && held && nctx.Err() == nil {
				onLockWait(holder)
			}
		})
		defer wg.Wait()
		defer done()
	}
	if hookBeforeUp != nil {
		hookBeforeUp()
	}
	return migrations.Up(ctx, migrations.Postgres, db, migrations.SessionLock(id))
}

// ping reaches the server within connectTimeout. Its error names the
// server and the bound when that is what ended it.
func ping(ctx context.Context, pool *pgxpool.Pool) error {
	pctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	err := pool.Ping(pctx)
	if err != nil && ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("postgres: %s did not answer within %v (is it a PostgreSQL server?): %w",
			target(pool.Config().ConnConfig), connectTimeout, context.DeadlineExceeded)
	}
	return err
}

// migrationPool is a pool of two connections for the migrations (goose's
// lock holds one) with statement_timeout 0, whatever the URL or
// --postgres-statement-timeout says: a migration statement may take
// longer than any call, and cancelling it would fail Open every time
// (issue 16 review 5).
func migrationPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: the URL does not parse: %w", err)
	}
	pcfg.MaxConns = 2
	pcfg.ConnConfig.RuntimeParams["statement_timeout"] = "0"
	pcfg.ConnConfig.RuntimeParams["application_name"] = migrationApp
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return pool, nil
}

// lockID is the migrations' advisory lock key for the schema the pool's
// sessions work in (their search_path's first): one migration at a time
// per schema, while other schemas of the database migrate freely.
func lockID(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var database, schema string
	if err := pool.QueryRow(ctx, "SELECT current_database(), coalesce(current_schema(), '')").Scan(&database, &schema); err != nil {
		return 0, err
	}
	return migrations.LockID(database, schema), nil
}

// lockHolder returns the session that holds the advisory lock id in this
// database, if any. PostgreSQL shows a bigint key's high and low 32 bits as
// the lock's classid and objid, with objsubid 1.
func lockHolder(ctx context.Context, pool *pgxpool.Pool, id int64) (LockHolder, bool, error) {
	var h LockHolder
	var since *time.Time
	// A role without pg_read_all_stats sees another role's session with
	// no client address and no start: those are unknown ("", zero), not
	// a local session started now. This process's own session (it holds
	// the lock while it migrates) is not another's.
	err := pool.QueryRow(ctx, `
		SELECT l.pid, coalesce(a.application_name, ''),
		       CASE WHEN a.backend_start IS NULL THEN '' WHEN a.client_addr IS NULL THEN 'local' ELSE host(a.client_addr) END,
		       a.backend_start
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND coalesce(a.application_name, '') <> $3
		LIMIT 1`, int64(uint64(id)>>32), int64(uint64(id)&0xffffffff), migrationApp).Scan(&h.PID, &h.Application, &h.Client, &since)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return LockHolder{}, false, nil
	case err != nil:
		return LockHolder{}, false, err
	}
	if since != nil {
		h.Since = *since
	}
	return h, true, nil
}

// migrate brings the Store's database to this server's schema, or with
// NoAutoMigrate checks that it is there.
// It runs on a pool of its own (migrationPool), not bounded by the
// Store's statement timeout.
func (s *Store) migrate(ctx context.Context) error {
	pool, err := migrationPool(ctx, s.cfg.URL)
	if err != nil {
		return err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	if s.cfg.NoAutoMigrate {
		return migrations.Check(ctx, migrations.Postgres, db)
	}
	_, err = up(ctx, pool, db, s.cfg.OnMigrationLockWait)
	return err
}
