package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"go.uber.org/zap"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/server"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/migrations"
	"github.com/historyd/historyd/internal/store/postgres"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// engine is the branch store --store chose, with what the start log line says about it and how to
// close it once the server has stopped (issue 14).
type engine struct {
	store.Store
	stats   interface{ Stats() store.Stats }               // what the metrics read
	storage interface{ StorageStats() store.StorageStats } // the storage metrics (issue 15); nil for memory
	backup  server.Backuper                                // what AdminService.Backup copies; nil for memory
	name    string                                         // storeSQLite, storePostgres or storeMemory
	warning string                                         // what the start logs as a warning, or ""
	file    string                                         // the database file; "" for memory and postgres
	target  string                                         // the PostgreSQL server and database (no password); "" for the others
	// exchange is the database the Exchange is kept in (issue 17); nil for memory, whose Exchange
	// stays in memory.
	exchange exchangedb.Driver
	close    func() error
}

// newExchange builds the Exchange over the engine's database (sqlite, postgres: mail survives a
// restart, and every replica over one PostgreSQL is one post office), or in memory for the memory
// engine, configured by the --exchange-* flags.
func (e *engine) newExchange(opts []exchange.Option) exchange.Service {
	if e.exchange == nil {
		return exchange.Memory(opts...)
	}
	return exchangedb.New(e.exchange, opts)
}

// logFields name the engine and its database file, for the "serving" line.
func (e *engine) logFields() []zap.Field {
	fields := []zap.Field{zap.String("store", e.name)}
	if e.file != "" {
		fields = append(fields, zap.String("data_file", e.file))
	}
	if e.target != "" {
		fields = append(fields, zap.String("postgres", e.target))
	}
	return fields
}

// openEngine builds the store c asks for: the memory engine as before issue 14, or the sqlite
// engine over --data-dir, which takes the directory's lock and migrates the schema (unless
// --auto-migrate=false). The error is one line for the log, naming the directory. log hears what
// the open waits for (another session's PostgreSQL migration lock).
func openEngine(ctx context.Context, c config, log *zap.Logger) (*engine, error) {
	if c.Store.Engine == storeMemory {
		m := store.NewMemory(c.History.options()...)
		return &engine{Store: m, stats: m, name: storeMemory, close: func() error { return nil }}, nil
	}
	if c.Store.Engine == storePostgres {
		return openPostgres(ctx, c, log)
	}
	s, err := sqlite.OpenStore(ctx, sqlite.StoreConfig{
		Config:           c.Store.sqliteConfig(),
		EventRetention:   c.History.EventRetention,
		SubscriberBuffer: c.History.WatchBuffer,
		MaxSubscriptions: c.History.WatchMaxStreams,

		SubscriberBufferBytes: int64(c.History.WatchBufferBytes),
	})
	if err != nil {
		return nil, storeError(c.Store.DataDir, err)
	}
	e := &engine{Store: s, stats: s, storage: s, backup: s, name: storeSQLite, file: s.Path(), exchange: s.ExchangeDriver(), close: s.Close}
	if size, limit := s.OverMaxBytes(); size > 0 {
		// A warning, not a refusal: reads, and deletes that make room, go on, and lowering the
		// limit below the size is how an operator stops a database's growth while trimming it.
		e.warning = fmt.Sprintf("database file %s is %d bytes, over --max-db-bytes=%d: it cannot grow, so every write that needs a new page fails with STORAGE_FULL until branches are deleted (their pages are reused) or the limit is raised", s.Path(), size, limit)
	}
	return e, nil
}

// storeError words a failure to open the data directory as the one log line an operator needs:
// which directory, and what to do about it.
func storeError(dir string, err error) error {
	var lockErr *sqlite.LockError
	var versionErr *migrations.VersionError
	var pendingErr *migrations.PendingError
	var dirErr *sqlite.DirError
	var fileErr *sqlite.FileError
	switch {
	case errors.As(err, &dirErr):
		return fmt.Errorf("%v; create it, or give historyd another --data-dir", dirErr)
	case errors.As(err, &fileErr):
		return fmt.Errorf("data directory %s: %v; historyd will not open it: move it away (or restore historyd's from a backup), or give historyd another --data-dir", dir, fileErr)
	case errors.As(err, &lockErr):
		return fmt.Errorf("data directory %s is in use by another historyd; stop it or give this one another --data-dir", lockErr.Dir)
	case errors.As(err, &versionErr):
		return fmt.Errorf("data directory %s: database schema version %d is newer than this historyd supports (%d); run a newer historyd",
			dir, versionErr.Database, versionErr.Supported)
	case errors.As(err, &pendingErr):
		return fmt.Errorf("data directory %s: database schema version %d is older than this historyd's (%d) and --auto-migrate is false; run `historyd migrate --data-dir %s` first",
			dir, pendingErr.Database, pendingErr.Supported, dir)
	}
	return fmt.Errorf("data directory %s: %w", dir, err)
}

// openPostgres opens the PostgreSQL engine (issue 16). An unreachable server is no error here: the
// engine keeps connecting with backoff while historyd serves with health NOT_SERVING (the engine's
// Health, which the server follows, says why and that it is retrying); a schema this historyd cannot
// serve is refused at start. While another session holds the schema's migration lock (another
// replica or `historyd migrate` migrating it) the open waits for it, up to migrations.LockWait,
// and says so first: a replica that starts and says nothing for minutes looks hung.
func openPostgres(ctx context.Context, c config, log *zap.Logger) (*engine, error) {
	cfg := c.Store.postgresConfig()
	cfg.OnMigrationLockWait = func(h postgres.LockHolder) {
		log.Warn(fmt.Sprintf("waiting up to %v for the PostgreSQL migration lock: another historyd or historyd migrate holds it while it migrates this schema", migrations.LockWait),
			append(c.Store.logFields(), zap.Int("holder_pid", h.PID), zap.String("holder_application", h.Application),
				zap.String("holder_client", holderClient(h)), zap.String("holder_since", holderSince(h)))...)
	}
	cfg.EventRetention = c.History.EventRetention
	cfg.SubscriberBuffer = c.History.WatchBuffer
	cfg.SubscriberBufferBytes = int64(c.History.WatchBufferBytes)
	cfg.MaxSubscriptions = c.History.WatchMaxStreams
	s, err := postgres.Open(ctx, cfg)
	if err != nil {
		return nil, postgresError(err)
	}
	return &engine{Store: s, stats: s, backup: databaseBackup{}, name: storePostgres, target: s.Target(), exchange: s.ExchangeDriver(), close: s.Close}, nil
}

// databaseBackup answers AdminService.Backup for the PostgreSQL engine: the database is backed up
// with its own tools, which see every replica's writes and can restore to a point in time.
type databaseBackup struct{}

func (databaseBackup) Backup(context.Context, io.Writer) (int64, error) {
	return 0, &store.BackupUnsupportedError{Why: "this historyd keeps its data in PostgreSQL: back it up with the database's own tools (pg_dump, or continuous archiving for point-in-time recovery; docs/operations.md#postgresql)"}
}

// postgresError words a refused PostgreSQL database as the one log line an operator needs.
func postgresError(err error) error {
	var versionErr *migrations.VersionError
	var pendingErr *migrations.PendingError
	switch {
	case errors.As(err, &versionErr):
		return fmt.Errorf("PostgreSQL: database schema version %d is newer than this historyd supports (%d); run a newer historyd",
			versionErr.Database, versionErr.Supported)
	case errors.As(err, &pendingErr):
		return fmt.Errorf("PostgreSQL: database schema version %d is older than this historyd's (%d) and --auto-migrate is false; run `historyd migrate --store postgres --postgres-url URL` first",
			pendingErr.Database, pendingErr.Supported)
	}
	return fmt.Errorf("PostgreSQL: %w", err)
}
