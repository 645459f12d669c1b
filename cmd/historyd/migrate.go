package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/historyd/historyd/internal/store/migrations"
	"github.com/historyd/historyd/internal/store/postgres"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// migrateUsage is the usage text of `historyd migrate`.
const migrateUsage = `usage: historyd migrate [--data-dir DIR]
       historyd migrate --store postgres --postgres-url URL
Applies the pending schema migrations of the sqlite database in DIR (default: HISTORYD_DATA_DIR,
else ./data; created when missing), or of the PostgreSQL database at URL (default:
HISTORYD_POSTGRES_URL), and prints the versions it applied, or that the schema is up to date. On
sqlite it takes the directory's lock, so it is refused while a historyd serves from it; on
PostgreSQL it takes an advisory lock, so replicas and this command starting together migrate once,
and historyd replicas may keep serving while it runs; it waits up to 5 minutes for a lock another
session holds, saying so on stderr after 2 s, and up to 10 s for the server to answer. Migrations
are additive: a historyd one version older keeps working on the migrated database, so a rolling
upgrade can migrate first and then replace the servers. A database whose schema is newer than this
historyd is refused, naming both versions. --postgres-url without --store postgres, and --data-dir
with it, are refused (HISTORYD_DATA_DIR, which images set, is ignored with postgres). Exit 0 when
the schema is up to date, 1 when it cannot be migrated, 2 for invalid flags.
`

// migrate is `historyd migrate` (issue 14): the server applies pending migrations at start unless
// --auto-migrate=false, and this is the step for deployments that turn that off.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("historyd migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fromEnv := func(s setting) string {
		if v := getenv(s.env); v != "" {
			return v
		}
		return s.def
	}
	var dir, engine, url string
	fs.StringVar(&engine, storeSettings[0].flag, fromEnv(storeSettings[0]), storeSettings[0].usage)
	fs.StringVar(&dir, storeSettings[1].flag, fromEnv(storeSettings[1]), storeSettings[1].usage)
	fs.StringVar(&url, storeSettings[7].flag, fromEnv(storeSettings[7]), storeSettings[7].usage)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, migrateUsage)
			return 0
		}
		fmt.Fprintf(stderr, "historyd migrate: %s (historyd migrate --help)\n", flagError(fs, err))
		return 2
	}
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "historyd migrate: unexpected arguments %q (historyd migrate --help)\n", fs.Args())
		return 2
	case engine == storeMemory:
		fmt.Fprintln(stderr, "historyd migrate: --store memory keeps no schema to migrate (historyd migrate --help)")
		return 2
	case engine != storeSQLite && engine != storePostgres:
		fmt.Fprintf(stderr, "historyd migrate: store %q: want sqlite or postgres (historyd migrate --help)\n", engine)
		return 2
	}
	// As serve does: a URL given with the sqlite engine is an operator who meant PostgreSQL, not
	// one who wants ./data migrated (config_engine.go).
	given := migrateGiven(fs, getenv)
	storeGiven := slices.ContainsFunc(given, func(s settingSource) bool { return s.flag == "store" })
	if err := engineMismatch(engine, storeGiven, given); err != nil {
		fmt.Fprintf(stderr, "historyd migrate: %v (historyd migrate --help)\n", err)
		return 2
	}
	switch {
	case engine == storePostgres:
		if url == "" {
			fmt.Fprintln(stderr, "historyd migrate: --store postgres needs --postgres-url (or HISTORYD_POSTGRES_URL) (historyd migrate --help)")
			return 2
		}
		return migratePostgres(ctx, url, stdout, stderr)
	case dir == "":
		fmt.Fprintln(stderr, "historyd migrate: --data-dir is empty: want a directory, such as ./data (historyd migrate --help)")
		return 2
	}
	file := filepath.Join(dir, sqlite.FileName)
	applied, err := sqlite.Migrate(ctx, dir)
	if err != nil {
		err = storeError(dir, err)
	}
	return reportMigration(file, migrations.SQLite, applied, err, stdout, stderr)
}

// migrateGiven lists migrate's settings given on the command line (fs, parsed) or in the
// environment, as givenSettings does for serve's: the store settings that fs defines.
func migrateGiven(fs *flag.FlagSet, getenv func(string) string) []settingSource {
	onCLI := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCLI[f.Name] = true })
	var given []settingSource
	for _, s := range storeSettings {
		if fs.Lookup(s.flag) == nil {
			continue // not one of migrate's flags
		}
		switch {
		case onCLI[s.flag]:
			given = append(given, settingSource{flag: s.flag})
		case getenv(s.env) != "":
			given = append(given, settingSource{flag: s.flag, env: s.env})
		}
	}
	return given
}

// migratePostgres migrates the PostgreSQL database at url (issue 16). Reaching the server is
// bounded (postgres.Migrate); waiting for another session's migration lock is not, within
// migrations.LockWait, so it says what it waits for first, on stderr (stdout keeps the results).
func migratePostgres(ctx context.Context, url string, stdout, stderr io.Writer) int {
	applied, err := postgres.Migrate(ctx, url, postgres.OnLockWait(func(h postgres.LockHolder) {
		app := ""
		if h.Application != "" {
			app = fmt.Sprintf(" %q", h.Application)
		}
		fmt.Fprintf(stderr, "historyd migrate: PostgreSQL %s: waiting up to %v for the migration lock, held by session %d%s from %s since %s: another historyd or historyd migrate holds it while it migrates this schema\n",
			postgresTarget(url), migrations.LockWait, h.PID, app, holderClient(h), holderSince(h))
	}))
	if err != nil {
		err = postgresError(err)
	}
	return reportMigration("PostgreSQL "+postgresTarget(url), migrations.Postgres, applied, err, stdout, stderr)
}

// holderClient and holderSince word what PostgreSQL shows of a lock holder: a role without
// pg_read_all_stats is not shown another role's client address and start.
func holderClient(h postgres.LockHolder) string {
	if h.Client == "" {
		return "an address not shown to this role"
	}
	return h.Client
}

func holderSince(h postgres.LockHolder) string {
	if h.Since.IsZero() {
		return "a time not shown to this role"
	}
	return h.Since.UTC().Format(time.RFC3339)
}

// reportMigration prints what a migration of the database file names applied, and its error.
func reportMigration(file string, dialect goose.Dialect, applied []int64, err error, stdout, stderr io.Writer) int {
	for _, v := range applied { // a failure part-way still reports what was applied
		fmt.Fprintf(stdout, "%s: applied migration %d\n", file, v)
	}
	if err != nil {
		fmt.Fprintf(stderr, "historyd migrate: %v\n", err)
		return 1
	}
	supported, err := migrations.Supported(dialect)
	if err != nil {
		fmt.Fprintf(stderr, "historyd migrate: %v\n", err)
		return 1
	}
	if len(applied) == 0 {
		fmt.Fprintf(stdout, "%s: schema up to date (version %d)\n", file, supported)
	} else {
		fmt.Fprintf(stdout, "%s: schema at version %d\n", file, supported)
	}
	return 0
}
