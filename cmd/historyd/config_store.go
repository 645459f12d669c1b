package main

import (
	"flag"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/historyd/historyd/internal/store/postgres"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// The engines --store names (issue 14): the durable SQLite engine is the default; the memory engine
// is for tests and throwaway use; PostgreSQL lets any number of replicas serve one history (issue 16).
const (
	storeSQLite   = "sqlite"
	storeMemory   = "memory"
	storePostgres = "postgres"
)

// storeConfig chooses and configures the engine behind HistoryService (issue 14).
type storeConfig struct {
	Engine      string // --store: storeSQLite, storeMemory or storePostgres
	DataDir     string // --data-dir: the SQLite engine's directory
	Sync        string // --sync: normal or full (sqlite.ParseSync)
	AutoMigrate bool   // --auto-migrate: apply pending migrations at start
	// SQLiteCache is the page cache of each SQLite connection, and SQLiteReaders the number of read
	// connections; the engine holds SQLiteReaders+1 caches (the readers and the one writer).
	SQLiteCache   byteSize
	SQLiteReaders int
	// MaxDBBytes bounds the database file (--max-db-bytes; 0: no limit): a write that would grow it
	// past the limit is RESOURCE_EXHAUSTED, like one on a full disk (issue 15).
	MaxDBBytes byteSize
	// PostgresURL is the database of --store postgres; PostgresMaxConns its pool's size per replica,
	// and PostgresStatementTimeout its sessions' statement_timeout (0: none) (issue 16).
	PostgresURL              string
	PostgresMaxConns         int
	PostgresStatementTimeout time.Duration
}

// defaultSQLiteCache and defaultSQLiteReaders fit the Kubernetes manifest's 512 MiB
// (deploy/kubernetes.yaml): 4 readers x 32 MiB + the writer's 8 MiB = 136 MiB of page cache, which leaves the
// exchange budget, the response buffers and the runtime their share.
const (
	defaultSQLiteCache   = "32MiB"
	defaultSQLiteReaders = 4
)

// storeSettings are the engine's settings; init appends them to settings, so they get the
// environment fallback, the usage lines and the README table like every other setting.
var storeSettings = []setting{
	{"store", "HISTORYD_STORE", storeSQLite, "the branch store's engine: sqlite (durable, in --data-dir), postgres (durable, in --postgres-url; any number of replicas may share it) or memory (lost when historyd stops: tests and throwaway use)"},
	{"data-dir", "HISTORYD_DATA_DIR", "./data", "directory of the sqlite engine's database (historyd.db), created 0700 when missing; one historyd at a time (a second one is refused)"},
	{"sync", "HISTORYD_SYNC", string(sqlite.SyncNormal), "sqlite durability: normal (an acknowledged write survives kill -9 of historyd; an OS crash or power loss may lose the last moments) or full (an acknowledged write has been fsynced)"},
	{"auto-migrate", "HISTORYD_AUTO_MIGRATE", "true", "apply the database's pending schema migrations at start; false refuses to start on a database that needs `historyd migrate`"},
	{"sqlite-cache", "HISTORYD_SQLITE_CACHE", defaultSQLiteCache, "sqlite page cache per connection (each reader has one; the writer's is the smaller of it and 8MiB), a size with an optional KiB, MiB or GiB suffix (>= 1MiB)"},
	{"sqlite-readers", "HISTORYD_SQLITE_READERS", strconv.Itoa(defaultSQLiteReaders), "sqlite read connections, each with its own --sqlite-cache (1 to 64)"},
	{"max-db-bytes", "HISTORYD_MAX_DB_BYTES", "0", "the largest the sqlite database file may grow, a size with an optional KiB, MiB or GiB suffix (0 = no limit, else at least 1MiB): a write past it is RESOURCE_EXHAUSTED (reason STORAGE_FULL) like one on a full disk, reads go on, and deleting branches makes room; the WAL beside it is not counted"},
	{"postgres-url", "HISTORYD_POSTGRES_URL", "", "the database of --store postgres, a libpq URL (postgres://user:password@host:5432/db?sslmode=verify-full) or key=value DSN; historyd replicas that share it serve one history"},
	{"postgres-max-conns", "HISTORYD_POSTGRES_MAX_CONNS", strconv.Itoa(int(postgres.DefaultMaxConns)), "connections this historyd's pool opens to PostgreSQL at most (1 to 1000), plus one that listens for the other replicas' commits; replicas x (this + 1) must stay under the server's max_connections"},
	{"postgres-statement-timeout", "HISTORYD_POSTGRES_STATEMENT_TIMEOUT", "0s", "PostgreSQL's statement_timeout for historyd's sessions (0s = none: each call's deadline still bounds its statements); a statement past it fails the call UNAVAILABLE"},
}

func init() { settings = append(settings, storeSettings...) }

// register defines the engine's flags on fs with their defaults.
func (c *storeConfig) register(fs *flag.FlagSet) {
	s := storeSettings
	fs.StringVar(&c.Engine, s[0].flag, s[0].def, s[0].usage)
	fs.StringVar(&c.DataDir, s[1].flag, s[1].def, s[1].usage)
	fs.StringVar(&c.Sync, s[2].flag, s[2].def, s[2].usage)
	fs.BoolVar(&c.AutoMigrate, s[3].flag, s[3].def == "true", s[3].usage)
	c.SQLiteCache = mustByteSize(s[4].def)
	fs.Var(&c.SQLiteCache, s[4].flag, s[4].usage)
	fs.IntVar(&c.SQLiteReaders, s[5].flag, mustInt(s[5].def), s[5].usage)
	c.MaxDBBytes = mustByteSize(s[6].def)
	fs.Var(&c.MaxDBBytes, s[6].flag, s[6].usage)
	fs.StringVar(&c.PostgresURL, s[7].flag, s[7].def, s[7].usage)
	fs.IntVar(&c.PostgresMaxConns, s[8].flag, mustInt(s[8].def), s[8].usage)
	fs.DurationVar(&c.PostgresStatementTimeout, s[9].flag, mustDuration(s[9].def), s[9].usage)
}

// defaultStoreConfig is the configuration with every engine flag at its default.
func defaultStoreConfig() storeConfig {
	var c storeConfig
	c.register(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return c
}

// validate checks the values that the flag types do not.
func (c storeConfig) validate() error {
	switch c.Engine {
	case storeSQLite, storeMemory:
	case storePostgres:
		if c.PostgresURL == "" {
			return usagef([]string{"store", "postgres-url"}, "--store postgres needs --postgres-url (or HISTORYD_POSTGRES_URL), such as postgres://historyd@127.0.0.1:5432/historyd")
		}
	default:
		return badValue("store", "%q: want sqlite, postgres or memory", c.Engine)
	}
	switch {
	case c.PostgresMaxConns < 1 || c.PostgresMaxConns > 1000:
		return badValue("postgres-max-conns", "%d: want 1 to 1000", c.PostgresMaxConns)
	case c.PostgresStatementTimeout < 0:
		return badValue("postgres-statement-timeout", "%s: want 0s (none) or more", c.PostgresStatementTimeout)
	}
	if _, err := sqlite.ParseSync(c.Sync); err != nil || c.Sync == "" {
		return badValue("sync", "%q: want normal or full", c.Sync)
	}
	switch {
	case c.DataDir == "":
		return usagef([]string{"data-dir"}, "--data-dir is empty: want a directory, such as ./data")
	case c.SQLiteCache < 1<<20:
		return badValue("sqlite-cache", "%s: must be at least 1MiB", &c.SQLiteCache)
	case c.SQLiteReaders < 1 || c.SQLiteReaders > 64:
		return badValue("sqlite-readers", "%d: want 1 to 64", c.SQLiteReaders)
	case c.MaxDBBytes != 0 && c.MaxDBBytes < 1<<20:
		return badValue("max-db-bytes", "%s: want 0 (no limit) or at least 1MiB", &c.MaxDBBytes)
	}
	return nil
}

// sqliteCacheBytes is the most page cache the sqlite engine holds: one cache per reader and one
// for the writer. --memory-limit auto counts it in place of --memory-budget.
func (c storeConfig) sqliteCacheBytes() int64 {
	return int64(c.SQLiteCache) * int64(c.SQLiteReaders+1)
}

// sqliteConfig is the engine's sqlite.Config.
func (c storeConfig) sqliteConfig() sqlite.Config {
	sync, _ := sqlite.ParseSync(c.Sync) // validate has checked it
	return sqlite.Config{
		Dir:           c.DataDir,
		Sync:          sync,
		NoAutoMigrate: !c.AutoMigrate,
		CacheKiB:      int(int64(c.SQLiteCache) / 1024),
		Readers:       c.SQLiteReaders,
		MaxBytes:      int64(c.MaxDBBytes),
	}
}

// postgresConfig is the engine's postgres.Config, without the history bounds openEngine adds.
func (c storeConfig) postgresConfig() postgres.Config {
	return postgres.Config{
		URL:              c.PostgresURL,
		MaxConns:         int32(c.PostgresMaxConns),
		StatementTimeout: c.PostgresStatementTimeout,
		NoAutoMigrate:    !c.AutoMigrate,
	}
}

// logFields name the engine and where its data is, for a line logged before the engine opened.
func (c storeConfig) logFields() []zap.Field {
	switch c.Engine {
	case storeMemory:
		return []zap.Field{zap.String("store", c.Engine)}
	case storePostgres:
		return []zap.Field{zap.String("store", c.Engine), zap.String("postgres", postgresTarget(c.PostgresURL))}
	}
	return []zap.Field{zap.String("store", c.Engine), zap.String("data_dir", c.DataDir)}
}

// postgresTarget is where a PostgreSQL URL or DSN points, host:port/database, without its user or
// password: what log lines may show.
func postgresTarget(url string) string {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return "(an invalid PostgreSQL URL)"
	}
	return fmt.Sprintf("%s:%d/%s", cfg.Host, cfg.Port, cfg.Database)
}
