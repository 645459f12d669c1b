package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/historyd/historyd/internal/store/migrations"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// migrateUsage is the usage text of `historyd migrate`.
const migrateUsage = `usage: historyd migrate [--data-dir DIR]
Applies the pending schema migrations of the sqlite database in DIR (default: HISTORYD_DATA_DIR,
else ./data; created when missing) and prints the versions it applied, or that the schema is up to
date. It takes the directory's lock, so it is refused while a historyd serves from it. Migrations
are additive: a historyd one version older keeps working on the migrated database, so a rolling
upgrade can migrate first and then replace the servers. A database whose schema is newer than this
historyd is refused, naming both versions. Exit 0 when the schema is up to date, 1 when it cannot
be migrated, 2 for invalid flags.
`

// migrate is `historyd migrate` (issue 14): the server applies pending migrations at start unless
// --auto-migrate=false, and this is the step for deployments that turn that off.
func migrate(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("historyd migrate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	dir := storeSettings[1].def
	if v := getenv(storeSettings[1].env); v != "" {
		dir = v
	}
	fs.StringVar(&dir, storeSettings[1].flag, dir, storeSettings[1].usage)
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
	case dir == "":
		fmt.Fprintln(stderr, "historyd migrate: --data-dir is empty: want a directory, such as ./data (historyd migrate --help)")
		return 2
	}
	file := filepath.Join(dir, sqlite.FileName)
	applied, err := sqlite.Migrate(ctx, dir)
	for _, v := range applied { // a failure part-way still reports what was applied
		fmt.Fprintf(stdout, "%s: applied migration %d\n", file, v)
	}
	if err != nil {
		fmt.Fprintf(stderr, "historyd migrate: %v\n", storeError(dir, err))
		return 1
	}
	supported, err := migrations.Supported(migrations.SQLite)
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
