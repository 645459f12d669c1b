package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// The PostgreSQL engine's rows (issue 16, "Benchmarks"). Every historyd the bench starts on
// PostgreSQL serves a schema of its own, made before it starts and dropped after it stops, named
// in the URL's search_path parameter (pgx sends a URL parameter it does not know as a run-time
// parameter, so every connection of the server's pool works in that schema). Without a
// PostgreSQL at -postgres-url, or with a historyd that has no --store postgres, each row says
// "skipped: ..." and has no figure.

// pgAdminConns is the pool the bench keeps for its own statements (schemas, the convoy's seed):
// the server is shared, its max_connections is 100 (the brief), and the measured pools need them.
const pgAdminConns = 2

// errNoPostgresEngine is returned by probePostgresEngine when historyd's help lists no
// --postgres-url: a binary from before the PostgreSQL engine.
var errNoPostgresEngine = errors.New("this historyd has no --store postgres (its help lists no --postgres-url)")

// probePostgresEngine tells whether bin can serve PostgreSQL, from its help text (historyd help
// lists every flag, generated from its settings table): the rows skip a binary without the engine
// rather than fail, and fail a binary that has it but cannot start.
func probePostgresEngine(ctx context.Context, bin string) error {
	cctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, "help").Output()
	if err != nil {
		return fmt.Errorf("%s help: %w", bin, err)
	}
	if !strings.Contains(string(out), "--postgres-url") {
		return errNoPostgresEngine
	}
	return nil
}

// pgEnv is what the PostgreSQL rows share: the admin pool, the server's settings and the
// URL the servers are given schemas of.
type pgEnv struct {
	admin    *pgxpool.Pool
	url      string // -postgres-url
	settings string // server_version, synchronous_commit, fsync, wal_sync_method
}

// openPGEnv connects the admin pool.
func openPGEnv(ctx context.Context, rawURL string) (*pgEnv, error) {
	pool, settings, err := connectPostgresConns(ctx, rawURL, pgAdminConns)
	if err != nil {
		return nil, err
	}
	return &pgEnv{admin: pool, url: rawURL, settings: settings}, nil
}

func (e *pgEnv) close() { e.admin.Close() }

// schemaSeq numbers the schemas of one bench process.
var schemaSeq atomic.Int64

// newSchema creates an empty schema and returns its name and the function that drops it, with a
// fresh context: the bench's may be cancelled, the schema must go anyway.
func (b *bench) newSchema(ctx context.Context, e *pgEnv) (string, func(), error) {
	name := fmt.Sprintf("historybench_%d_%d", os.Getpid(), schemaSeq.Add(1))
	if _, err := e.admin.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", nil, fmt.Errorf("PostgreSQL: %w", err)
	}
	return name, func() {
		dctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := e.admin.Exec(dctx, "DROP SCHEMA "+name+" CASCADE"); err != nil {
			b.progress("PostgreSQL: dropping schema %s: %v", name, err)
		}
	}, nil
}

// withSearchPath returns the connection string rawURL (a URL or a key=value DSN, as libpq takes
// either) with search_path set to schema.
func withSearchPath(rawURL, schema string) (string, error) {
	if !strings.Contains(rawURL, "://") {
		return strings.TrimSpace(rawURL) + " search_path=" + schema, nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// pgServer is a historyd on the PostgreSQL engine, in a schema of its own or sharing one.
type pgServer struct {
	*historyd
	Schema string
}

// startPostgres starts a historyd on schema with a pool of conns connections and the bench's own
// settings.
func (b *bench) startPostgres(ctx context.Context, e *pgEnv, schema string, conns int) (*pgServer, error) {
	u, err := withSearchPath(e.url, schema)
	if err != nil {
		return nil, err
	}
	// Not cfg.ServerFlags: they are the memory engine's budgets, which historyd refuses beside
	// --store postgres.
	flags := []string{"--store", "postgres", "--postgres-url", u, "--postgres-max-conns", strconv.Itoa(conns)}
	h, err := startHistoryd(ctx, b.bin, flags...)
	if err != nil {
		return nil, fmt.Errorf("historyd on PostgreSQL (schema %s): %w", schema, err)
	}
	return &pgServer{historyd: h, Schema: schema}, nil
}

// withFreshServer runs fn against a historyd on a schema of its own, made for it and dropped
// after it stops.
func (b *bench) withFreshServer(ctx context.Context, e *pgEnv, conns int, fn func(*pgServer) error) error {
	schema, drop, err := b.newSchema(ctx, e)
	if err != nil {
		return err
	}
	defer drop()
	s, err := b.startPostgres(ctx, e, schema, conns)
	if err != nil {
		return err
	}
	err = fn(s)
	if serr := s.stop(); err == nil {
		err = serr
	}
	return err
}

// pgSkipped returns the PostgreSQL engine's rows without figures, each saying why.
func (c config) pgSkipped(reason string, err error) []row {
	insertTarget, insertMeets := atLeast(0.5)
	convoyTarget, convoyMeets := atMost(2.0)
	exchangeTarget, exchangeMeets := atLeast(0.3)
	rows := []row{
		{Name: pgInsertRowName, Unit: "ratio", Target: insertTarget, meets: insertMeets},
		{Name: pgConvoyRowName(c.ConvoyMessages), Unit: "ratio", Target: convoyTarget, meets: convoyMeets},
		{Name: pgWatchLatencyName + " p50", Unit: "ms"},
		{Name: pgWatchLatencyName + " p99", Unit: "ms"},
		{Name: pgWatchersRowName(c.Watchers), Unit: "ratio"},
		{Name: exchangeEnginesRowName(c.Owners, pgExchangeEngine), Unit: "ratio", Target: exchangeTarget, meets: exchangeMeets},
	}
	for i := range rows {
		rows[i].Skipped, rows[i].Detail = "skipped: "+reason, err.Error()
	}
	return rows
}

// openPGEngine opens the PostgreSQL environment of the rows that run historyd --store postgres.
// When it cannot (historyd cannot serve PostgreSQL, or there is none at --postgres-url), it returns
// the error and the reason the rows are skipped for.
func (b *bench) openPGEngine(ctx context.Context) (e *pgEnv, reason string, err error) {
	if err := probePostgresEngine(ctx, b.bin); err != nil {
		return nil, "historyd cannot serve PostgreSQL", err
	}
	if e, err = openPGEnv(ctx, b.cfg.PostgresURL); err != nil {
		return nil, "no PostgreSQL at " + redactURL(b.cfg.PostgresURL), err
	}
	return e, "", nil
}

// benchPostgresEngine runs the PostgreSQL engine's scenarios (issue 16), or returns its rows
// skipped, each saying why.
func benchPostgresEngine(ctx context.Context, b *bench) ([]row, error) {
	skip := func(reason string, err error) []row {
		b.progress("PostgreSQL engine rows skipped: %s: %v", reason, err)
		rows := b.cfg.pgSkipped(reason, err)
		if b.cfg.Engines == "pgexchange" {
			rows = rows[len(rows)-1:]
		}
		return rows
	}
	e, reason, err := b.openPGEngine(ctx)
	if err != nil {
		return skip(reason, err), nil
	}
	defer e.close()
	var rows []row
	scenarios := []func(context.Context, *bench, *pgEnv) ([]row, error){
		benchPGInsert, benchPGConvoy, benchPGWatch, benchPGExchange,
	}
	if b.cfg.Engines == "pgexchange" { // issue 17's Exchange row alone
		scenarios = scenarios[3:]
	}
	for _, scenario := range scenarios {
		rs, err := scenario(ctx, b, e)
		if err != nil {
			return nil, err
		}
		rows = append(rows, rs...)
	}
	return rows, nil
}
