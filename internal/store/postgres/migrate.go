package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/historyd/historyd/internal/store/migrations"
)

// Migrate applies the pending migrations to the database at url (historyd
// migrate --store postgres) and returns the versions it applied. It holds
// goose's session advisory lock while it does, so replicas starting
// together migrate once.
func Migrate(ctx context.Context, url string) (applied []int64, err error) {
	pool, err := migrationPool(ctx, url)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	id, err := lockID(ctx, pool)
	if err != nil {
		return nil, err
	}
	return migrations.Up(ctx, migrations.Postgres, db, migrations.SessionLock(id))
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
	id, err := lockID(ctx, pool)
	if err != nil {
		return err
	}
	_, err = migrations.Up(ctx, migrations.Postgres, db, migrations.SessionLock(id))
	return err
}
