//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store/exchangedb"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// readSQLiteLedger reads the ledger the server killed on dir left (crash_exchange_test.go): the
// ledger is no part of the API, so the harness opens the database itself, through the sqlite
// engine and exchangedb's Ledger, as the server would. It opens a copy of the database and its
// WAL, not dir: the restarted server must recover the files exactly as the kill left them, and
// opening them here would already have replayed and checkpointed the WAL.
func readSQLiteLedger(ctx context.Context, t *testing.T, dir string) ([]exchange.LedgerEntry, error) {
	t.Helper()
	cp := t.TempDir()
	for _, name := range []string{sqlite.FileName, sqlite.FileName + "-wal"} {
		if err := copyFile(filepath.Join(dir, name), filepath.Join(cp, name)); errors.Is(err, fs.ErrNotExist) && name != sqlite.FileName {
			continue // no WAL: everything is in the database file
		} else if err != nil {
			return nil, err
		}
	}
	// The -shm index is left behind: it is rebuilt from the WAL, and a copy of it taken apart from
	// the WAL could describe another WAL.
	// The default read pool, not one reader: at exsql f6ef998, the sqlite driver prepares a read
	// statement on first use on the pool while its transaction holds a connection, so with one
	// reader the first Ledger read waits for itself until ctx ends (reported to the lead).
	st, err := sqlite.OpenStore(ctx, sqlite.StoreConfig{Config: sqlite.Config{Dir: cp, NoAutoMigrate: true}})
	if err != nil {
		return nil, fmt.Errorf("opening a copy of %s: %w", dir, err)
	}
	defer st.Close()
	x := exchangedb.New(st.ExchangeDriver(), nil)
	defer x.Close()
	return x.Ledger(ctx)
}

// copyFile copies src to dst.
func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
