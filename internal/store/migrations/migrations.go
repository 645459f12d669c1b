// Package migrations holds historyd's schema as embedded, versioned SQL
// migrations, one directory per dialect (sqlite/, postgres/), applied with
// github.com/pressly/goose/v3 (docs/design.md#storage). The two
// directories carry the same versions; each file marks where its dialect
// differs. Migrations are additive: a new version adds tables, columns or
// indexes (expand) and a later release removes what no server reads any
// more (contract), so a server one version older keeps working on a
// migrated database during a rolling upgrade. A database whose schema is
// newer than the server knows is refused (ErrSchemaTooNew).
//
// Import rule: the standard library and goose (with its lock package) only.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed sqlite/*.sql postgres/*.sql
var files embed.FS

// The dialects, as goose names them.
const (
	SQLite   = goose.DialectSQLite3
	Postgres = goose.DialectPostgres
)

// ErrSchemaTooNew is a database migrated by a newer historyd than this one.
var ErrSchemaTooNew = errors.New("database schema is newer than this server supports")

// VersionError names both versions of a refused database.
type VersionError struct {
	Database, Supported int64
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("database schema version %d is newer than this server supports (%d); run a newer historyd", e.Database, e.Supported)
}

func (e *VersionError) Unwrap() error { return ErrSchemaTooNew }

// dir returns the migrations of a dialect.
func dir(d goose.Dialect) (fs.FS, error) {
	switch d {
	case SQLite:
		return fs.Sub(files, "sqlite")
	case Postgres:
		return fs.Sub(files, "postgres")
	}
	return nil, fmt.Errorf("migrations: unknown dialect %q", d)
}

// Option changes how Up runs.
type Option func(*options)

type options struct {
	sessionLock bool
	lockID      int64
}

// SessionLock makes Up hold a PostgreSQL session advisory lock (goose's
// lock.NewPostgresSessionLocker) with key id while it reads the version
// and applies the pending migrations, so replicas that start together
// against one schema migrate it once (issue 16); the others wait, then
// find nothing pending. The key names the schema (LockID): servers on
// other schemas of the database, or other applications' goose, never wait
// for it. Only the postgres dialect has it: with another, Up fails.
func SessionLock(id int64) Option {
	return func(o *options) { o.sessionLock, o.lockID = true, id }
}

// LockWait is how long Up with SessionLock waits for a lock another session
// holds (another replica's or `historyd migrate`'s migration) before it
// fails.
const LockWait = 5 * time.Minute

// LockID is SessionLock's key for historyd's schema in a database: a
// 64-bit FNV-1a hash of both names, so that every replica of one schema
// computes the same key and no two schemas share one but by chance.
func LockID(database, schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("historyd migrations\x00" + database + "\x00" + schema))
	return int64(h.Sum64())
}

// provider returns a goose provider over db's dialect migrations.
func provider(d goose.Dialect, db *sql.DB, opts ...Option) (*goose.Provider, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	fsys, err := dir(d)
	if err != nil {
		return nil, err
	}
	popts := []goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}
	if o.sessionLock {
		if d != Postgres {
			return nil, fmt.Errorf("migrations: a session lock needs the postgres dialect, not %q", d)
		}
		// Probe every second (goose's default is 5 s) for up to LockWait:
		// a replica waiting behind another's migration starts soon after.
		l, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, uint64(LockWait/time.Second)), lock.WithLockID(o.lockID))
		if err != nil {
			return nil, fmt.Errorf("migrations: %w", err)
		}
		popts = append(popts, goose.WithSessionLocker(l))
	}
	return goose.NewProvider(d, db, fsys, popts...)
}

// Supported returns the newest schema version this server knows.
func Supported(d goose.Dialect) (int64, error) {
	fsys, err := dir(d)
	if err != nil {
		return 0, err
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return 0, err
	}
	var latest int64
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		if err != nil {
			return 0, err
		}
		latest = max(latest, v)
	}
	return latest, nil
}

// Up applies the pending migrations and returns the versions it applied.
// A database newer than this server is refused before anything is done.
func Up(ctx context.Context, d goose.Dialect, db *sql.DB, opts ...Option) ([]int64, error) {
	p, err := provider(d, db, opts...)
	if err != nil {
		return nil, err
	}
	if err := check(ctx, p); err != nil {
		return nil, err
	}
	res, err := p.Up(ctx)
	applied := make([]int64, 0, len(res))
	for _, r := range res {
		applied = append(applied, r.Source.Version)
	}
	if err != nil {
		return applied, fmt.Errorf("migrations: %w", err)
	}
	return applied, nil
}

// Check returns nil when the database is at the version this server
// supports, a *VersionError (ErrSchemaTooNew) when it is newer, and
// ErrPending naming both versions when migrations are pending.
func Check(ctx context.Context, d goose.Dialect, db *sql.DB) error {
	p, err := provider(d, db)
	if err != nil {
		return err
	}
	if err := check(ctx, p); err != nil {
		return err
	}
	cur, target, err := p.GetVersions(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if cur < target {
		return &PendingError{Database: cur, Supported: target}
	}
	return nil
}

// ErrPending is a database that needs `historyd migrate` (or a start
// without --auto-migrate=false).
var ErrPending = errors.New("database schema has pending migrations")

// PendingError names both versions of a database behind this server.
type PendingError struct {
	Database, Supported int64
}

func (e *PendingError) Error() string {
	return fmt.Sprintf("database schema version %d is older than this server's (%d): run `historyd migrate`, or start without --auto-migrate=false", e.Database, e.Supported)
}

func (e *PendingError) Unwrap() error { return ErrPending }

// check refuses a database whose schema is newer than p knows.
func check(ctx context.Context, p *goose.Provider) error {
	src := p.ListSources()
	var supported int64
	if len(src) > 0 {
		supported = src[len(src)-1].Version
	}
	cur, err := p.GetDBVersion(ctx)
	if err != nil {
		return fmt.Errorf("migrations: reading the schema version: %w", err)
	}
	if cur > supported {
		return &VersionError{Database: cur, Supported: supported}
	}
	return nil
}

// Files returns the embedded migrations, one directory per dialect.
func Files() fs.FS { return files }
