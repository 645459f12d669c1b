package main

import (
	"context"
	"fmt"
	"time"
)

// pgInsertRowName names issue 16's first row.
const pgInsertRowName = "AddMessage throughput, historyd on PostgreSQL / PostgreSQL INSERT (synchronous_commit on), concurrency 50"

// benchPGInsert measures AddMessage throughput at concurrency 50, a branch per worker, on a
// historyd on PostgreSQL over INSERTs of the same 1 KB message's row into PostgreSQL by this
// process at the same concurrency (issue 16: "historyd-on-PostgreSQL AddMessage at concurrency
// 50, a branch per worker, >= 0.5x a raw pgx INSERT of the same 1 KB row by the same harness
// (synchronous_commit on); report both").
//
// Both sides get the same number of connections, -postgres-max-conns (50 by default: one per
// worker, so neither waits for a connection), and never hold them at the same time: the server is
// shared and allows 100. So each run starts a historyd on a fresh schema and stops it, and opens
// the INSERT pool on a fresh table and closes it; each side warms up for a quarter of the run
// (connections, prepared statements) before it is measured.
func benchPGInsert(ctx context.Context, b *bench, e *pgEnv) ([]row, error) {
	conns, d := b.cfg.PostgresMaxConns, b.cfg.Duration
	historydRun := func() (measured, error) {
		var m measured
		err := b.withFreshServer(ctx, e, conns, func(s *pgServer) error {
			if _, err := addLoad(ctx, s.historyd, d/4)(); err != nil {
				return err
			}
			var err error
			m, err = addLoad(ctx, s.historyd, d)()
			return err
		})
		return m, err
	}
	insertRun := func() (measured, error) {
		schema, drop, err := b.newSchema(ctx, e)
		if err != nil {
			return measured{}, err
		}
		defer drop()
		if _, err := e.admin.Exec(ctx, fmt.Sprintf(pgTable, schema)); err != nil {
			return measured{}, fmt.Errorf("PostgreSQL: %w", err)
		}
		pool, _, err := connectPostgresConns(ctx, e.url, conns)
		if err != nil {
			return measured{}, err
		}
		defer pool.Close()
		if _, err := pgInsertLoad(ctx, pool, schema, d/4)(); err != nil {
			return measured{}, err
		}
		return pgInsertLoad(ctx, pool, schema, d)()
	}
	t0 := time.Now()
	// No warm-up runs before the first: every run warms its own server and pool up.
	xs, ys, err := alternateRuns(b, "AddMessage/s on PostgreSQL over PostgreSQL INSERT/s, c=50,", historydRun, insertRun)
	if err != nil {
		return nil, err
	}
	rs, x, y, xc, _ := ratios(xs, ys)
	r := row{
		Name: pgInsertRowName, Unit: "ratio", Runs: rs,
		Detail: fmt.Sprintf("historyd %.0f/s (server CPU a call %.0f µs), PostgreSQL INSERT %.0f/s; %d connections each (%s)",
			x, xc, y, conns, e.settings),
		Note: fmt.Sprintf("PostgreSQL %s; historyd `--store postgres --postgres-max-conns %d` on a schema of its own per run, "+
			"a branch per worker; the INSERT side: one INSERT of a 1 KB message's row (a table shaped as the engine's messages table) per call, "+
			"a pool of %d connections; each side warmed up for a quarter of the run, never both connected at once", redactURL(e.url), conns, conns),
	}
	r.Target, r.meets = atLeast(0.5)
	b.progress("PostgreSQL engine: AddMessage over INSERT in %v", time.Since(t0).Round(time.Second))
	if r.Met() == "NO" && b.cfg.Profile {
		err := b.withFreshServer(ctx, e, conns, func(s *pgServer) error {
			var err error
			r.Profile, err = b.cpuProfile(ctx, s.historyd, func(context.Context) error {
				_, err := addLoad(ctx, s.historyd, b.profileDuration())()
				return err
			})
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return []row{r}, nil
}
