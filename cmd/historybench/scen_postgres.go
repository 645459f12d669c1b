package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// pgConnectTimeout bounds how long the bench looks for PostgreSQL before it skips the row.
const pgConnectTimeout = 5 * time.Second

// pgTable is the table the PostgreSQL load writes: the shape of the sqlite engine's messages table
// (internal/store/migrations/postgres/00001_initial.sql: its primary key and its position index),
// so that each INSERT maintains what a stored message's row maintains there.
const pgTable = `CREATE TABLE %s.messages (
	tenant    text    NOT NULL DEFAULT '',
	branch_id uuid    NOT NULL,
	id        uuid    NOT NULL,
	pos       bigint  NOT NULL,
	kind      integer NOT NULL,
	rank      bigint  NOT NULL,
	seq       bigint  NOT NULL,
	body      text    NOT NULL,
	PRIMARY KEY (tenant, branch_id, id)
);
CREATE UNIQUE INDEX ON %[1]s.messages (tenant, branch_id, pos)`

// benchSQLiteVsPostgres measures AddMessage throughput at concurrency 50 on a sqlite-engine
// historyd with --sync=full over INSERTs of a 1 KB message's row into PostgreSQL with
// synchronous_commit on, from this process at the same concurrency (issue 14: target at least
// 1.0; both acknowledge a write once it is fsynced). The PostgreSQL side has no gRPC hop and no
// event row: it is the floor a PostgreSQL engine's write would stand on. Without a PostgreSQL at
// -postgres-url the row says so, and has no figure.
func benchSQLiteVsPostgres(ctx context.Context, b *bench) ([]row, error) {
	name := "AddMessage throughput, sqlite --sync=full / PostgreSQL INSERT (synchronous_commit on), concurrency 50"
	target, meets := atLeast(1.0)
	pool, settings, err := connectPostgres(ctx, b.cfg.PostgresURL)
	if err != nil {
		b.progress("PostgreSQL row skipped: %v", err)
		skipped := "skipped: no PostgreSQL at " + redactURL(b.cfg.PostgresURL)
		return []row{{Name: name, Unit: "ratio", Target: target, meets: meets, Skipped: skipped, Detail: err.Error()},
			{Name: memoryOverInsertName, Unit: "ratio", Skipped: skipped, Detail: err.Error()}}, nil
	}
	defer pool.Close()
	schema := fmt.Sprintf("historybench_%d_%d", os.Getpid(), time.Now().UnixNano())
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	defer func() { // a fresh context: the bench's may be cancelled, the schema must go anyway
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(dctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			b.progress("PostgreSQL: dropping schema %s: %v", schema, err)
		}
	}()
	if _, err := pool.Exec(ctx, fmt.Sprintf(pgTable, schema)); err != nil {
		return nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	sq, err := b.startSQLite(ctx, "full")
	if err != nil {
		return nil, err
	}
	defer sq.stop()
	xs, ys, err := alternate(b, "AddMessage/s on sqlite full over PostgreSQL INSERT/s, c=50,",
		addLoad(ctx, sq.historyd, b.cfg.Duration), pgInsertLoad(ctx, pool, schema, b.cfg.Duration))
	if err != nil {
		return nil, err
	}
	rs, x, y, xc, yc := ratios(xs, ys)
	client := func(m measured) float64 { return m.ClientCPU }
	r := row{
		Name: name, Unit: "ratio", Runs: rs, Target: target, meets: meets,
		Detail: fmt.Sprintf("sqlite %.0f/s, PostgreSQL %.0f/s; CPU a write: historyd %.0f µs and the load generator %.0f µs, "+
			"%s and the load generator %.0f µs (%s)",
			x, y, xc, medianOf(xs, client), postgresCPUDetail(yc), medianOf(ys, client), settings),
		Note: "PostgreSQL " + redactURL(b.cfg.PostgresURL) + ", one INSERT of a 1 KB message's row (a table shaped as the engine's messages table, in a schema the bench creates and drops) per call, a pool of 50 connections; sqlite: one historyd, a branch per worker",
	}
	if r.Met() == "NO" && b.cfg.Profile {
		r.Profile, err = b.cpuProfile(ctx, sq.historyd, func(context.Context) error {
			_, err := addLoad(ctx, sq.historyd, b.profileDuration())()
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	if err := sq.stop(); err != nil {
		return nil, err
	}
	ceiling, err := benchMemoryVsPostgres(ctx, b, pool, schema)
	if err != nil {
		return nil, err
	}
	return []row{r, ceiling}, nil
}

// memoryOverInsertName names benchMemoryVsPostgres's row.
const memoryOverInsertName = "AddMessage throughput, memory engine / PostgreSQL INSERT (synchronous_commit on), concurrency 50 (reported: the most the sqlite --sync=full row can reach here)"

// benchMemoryVsPostgres is the reported row beside benchSQLiteVsPostgres: the memory engine's
// AddMessage (no storage, no fsync) over the same INSERT, alternated the same way. A durable
// engine behind the same gRPC call does strictly more work a write than the memory engine, so
// this ratio is the most the sqlite --sync=full row can reach on the machine: where it is near
// 1 (a disk whose fsync is fast, PostgreSQL's INSERT at the gRPC call's own rate), the row's
// target of 1.0 is out of reach of any durable engine behind historyd's call.
func benchMemoryVsPostgres(ctx context.Context, b *bench, pool *pgxpool.Pool, schema string) (row, error) {
	mem, err := startHistoryd(ctx, b.bin, b.memoryFlags()...)
	if err != nil {
		return row{}, err
	}
	defer mem.stop()
	xs, ys, err := alternate(b, "AddMessage/s on memory over PostgreSQL INSERT/s, c=50,",
		addLoad(ctx, mem, b.cfg.Duration), pgInsertLoad(ctx, pool, schema, b.cfg.Duration))
	if err != nil {
		return row{}, err
	}
	rs, x, y, xc, yc := ratios(xs, ys)
	return row{
		Name: memoryOverInsertName, Unit: "ratio", Runs: rs,
		Detail: fmt.Sprintf("memory %.0f/s, PostgreSQL %.0f/s; CPU a write: historyd %.0f µs, %s",
			x, y, xc, postgresCPUDetail(yc)),
		Note: "the same INSERT and pool as the sqlite --sync=full row, right after it; the memory engine stores nothing durably, so no durable engine behind the same call can pass this ratio",
	}, nil
}

// connectPostgres opens a pool of engineConcurrency connections with synchronous_commit on and
// returns the server's durability settings as the detail shows them.
func connectPostgres(ctx context.Context, rawURL string) (*pgxpool.Pool, string, error) {
	return connectPostgresConns(ctx, rawURL, engineConcurrency)
}

// connectPostgresConns is connectPostgres with a pool of conns connections.
func connectPostgresConns(ctx context.Context, rawURL string, conns int) (*pgxpool.Pool, string, error) {
	cfg, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		return nil, "", err
	}
	cfg.MaxConns, cfg.MinConns = int32(conns), int32(conns)
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "on"
	cctx, cancel := context.WithTimeout(ctx, pgConnectTimeout)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(cctx, cfg)
	if err != nil {
		return nil, "", err
	}
	var settings []string
	for _, s := range []string{"server_version", "synchronous_commit", "fsync", "wal_sync_method"} {
		var v string
		if err := pool.QueryRow(cctx, "SHOW "+s).Scan(&v); err != nil {
			pool.Close()
			return nil, "", err
		}
		settings = append(settings, s+" "+v)
	}
	return pool, strings.Join(settings, ", "), nil
}

// pgInsertLoad is the PostgreSQL side: engineConcurrency workers, each inserting rows of a branch
// of its own, for d. The body is a 1 KB instruction as JSON, about the stored message's size.
func pgInsertLoad(ctx context.Context, pool *pgxpool.Pool, schema string, d time.Duration) func() (measured, error) {
	insert := "INSERT INTO " + schema + ".messages (branch_id, id, pos, kind, rank, seq, body) VALUES ($1, $2, $3, 1, $3, $3, $4)"
	return func() (measured, error) {
		branches := make([]uuid.UUID, engineConcurrency)
		bodies := make([]string, engineConcurrency)
		for w := range branches {
			branches[w] = uuid.New()
			bodies[w] = fmt.Sprintf(`{"role":"user","content":{"instruction":%q}}`, fmt.Sprint(w, " ", kilobyteText))
		}
		p0 := postgresProcs()
		c0, err := cpuTimeOf(os.Getpid())
		if err != nil {
			return measured{}, err
		}
		r, err := closedLoop(ctx, engineConcurrency, d, func(ctx context.Context, w, i int) (int, error) {
			_, err := pool.Exec(ctx, insert, branches[w], uuid.New(), i, bodies[w])
			return 1, err
		})
		if err != nil {
			return measured{}, fmt.Errorf("PostgreSQL INSERT: %w", err)
		}
		c1, err := cpuTimeOf(os.Getpid())
		if err != nil {
			return measured{}, err
		}
		pg := postgresCPUSince(p0)
		n := float64(r.Ops)
		m := measured{PerSecond: r.PerSecond(), ClientCPU: micros(c1-c0) / n, ServerCPU: micros(pg) / n}
		// Keep the table small between runs, as the sqlite side deletes its branches.
		if _, err := pool.Exec(ctx, "TRUNCATE "+schema+".messages"); err != nil {
			return measured{}, err
		}
		return m, nil
	}
}

// postgresCPUDetail words PostgreSQL's CPU a write for the detail: none read means no process
// named postgres was visible (a server on another machine, in a container, or behind /proc's
// hidepid).
func postgresCPUDetail(us float64) string {
	if us <= 0 {
		return "PostgreSQL's processes not measured (none visible on this machine)"
	}
	return fmt.Sprintf("PostgreSQL's processes %.0f µs", us)
}

// postgresProcs reads every process of this machine named postgres (the server, its background
// processes and its backends), by pid.
func postgresProcs() map[int]procSample {
	procs, _ := filepath.Glob("/proc/[0-9]*/comm")
	seen := map[int]procSample{}
	for _, p := range procs {
		comm, err := os.ReadFile(p)
		if err != nil || strings.TrimSpace(string(comm)) != "postgres" {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if err != nil {
			continue
		}
		if p, err := procTimes(pid); err == nil {
			seen[pid] = p
		}
	}
	return seen
}

// postgresCPUSince is the CPU time the processes named postgres spent since before was read: each
// process's own growth, all of it for one that started since. One that ended meanwhile is missed,
// so the figure reads low when processes come and go (the INSERT pool holds its backends for the
// whole run), and it counts whatever else this machine's PostgreSQL did meanwhile.
func postgresCPUSince(before map[int]procSample) time.Duration {
	var sum time.Duration
	for pid, now := range postgresProcs() {
		if b, ok := before[pid]; ok && b.start == now.start {
			sum += now.cpu - b.cpu
		} else {
			sum += now.cpu
		}
	}
	return sum
}

// redactURL hides a password in a connection URL.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
