package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/storetest"
)

// damageTables overwrites every page at the root of table's b-trees (the
// table's and its indexes') in the closed database of dir: a small table is
// its root pages, so every read of it meets SQLITE_CORRUPT.
func damageTables(t *testing.T, dir string, table string) {
	t.Helper()
	path := filepath.Join(dir, FileName)
	raw, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	var pageSize int64
	if err := raw.QueryRow("PRAGMA page_size").Scan(&pageSize); err != nil {
		t.Fatal(err)
	}
	rows, err := raw.Query("SELECT rootpage FROM sqlite_schema WHERE tbl_name = ? AND rootpage > 0", table)
	if err != nil {
		t.Fatal(err)
	}
	var roots []int64
	for rows.Next() {
		var r int64
		if err := rows.Scan(&r); err != nil {
			t.Fatal(err)
		}
		roots = append(roots, r)
	}
	rows.Close()
	raw.Close()
	if len(roots) == 0 {
		t.Fatalf("no b-tree of table %s", table)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range roots {
		if _, err := f.WriteAt([]byte(strings.Repeat("\xde\xad", int(pageSize/2))), (r-1)*pageSize); err != nil {
			t.Fatal(err)
		}
	}
}

// Review of the read paths, fault 2: the reads made outside a read
// transaction (Recall before every write with a request_id, the request-id
// check of create, import and fork, and prepare's check that a branch id is
// free) returned SQLite's error unsorted: INTERNAL instead of DATA_LOSS or
// UNAVAILABLE, and the store's health never heard of it. Each is now a
// *StorageError naming the file, and marks the damage.
func TestReadFaultsOutsideTransactionsAreStorageErrors(t *testing.T) {
	ctx := context.Background()
	// setUp writes a branch (created and added to with request ids), closes
	// the store, damages table and opens it again.
	setUp := func(t *testing.T, table string) (*Store, uuid.UUID) {
		dir := filepath.Join(t.TempDir(), "data")
		s := open(t, dir)
		created, err := s.CreateBranch(ctx, store.CreateBranchInput{RequestID: "create-1"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.AddMessage(ctx, created.Branch.ID, addInput("x"), store.WriteOptions{RequestID: "add-1"}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		damageTables(t, dir, table)
		s = open(t, dir)
		t.Cleanup(func() { s.Close() })
		return s, created.Branch.ID
	}
	damaged := func(t *testing.T, s *Store, what string, err error) {
		t.Helper()
		var se *StorageError
		if !errors.Is(err, store.ErrStorageDamaged) || !errors.As(err, &se) || se.File != s.Path() {
			t.Errorf("%s: error %v (%T), want a *StorageError of the damaged file", what, err, err)
		}
		if _, unusable := s.Health(); !errors.Is(unusable, store.ErrStorageDamaged) {
			t.Errorf("%s: health says %v, want the damage", what, unusable)
		}
	}

	t.Run("requests", func(t *testing.T) {
		s, id := setUp(t, "requests")
		_, _, err := s.Recall(ctx, "", nil, store.OpCreateBranch, "create-1")
		damaged(t, s, "Recall", err)
		_, err = s.CreateBranch(ctx, store.CreateBranchInput{RequestID: "create-2"})
		damaged(t, s, "CreateBranch with a request id", err)
		_, err = s.ImportBranch(ctx, store.ImportInput{Data: jsonv.ArrayValue(), RequestID: "import-1"})
		damaged(t, s, "ImportBranch with a request id", err)
		_, err = s.ForkBranch(ctx, store.ForkInput{Source: id, RequestID: "fork-1"})
		damaged(t, s, "ForkBranch with a request id", err)
	})
	t.Run("branches", func(t *testing.T) {
		s, id := setUp(t, "branches")
		_, _, err := s.Recall(ctx, "", &id, store.OpAddMessage, "add-1")
		damaged(t, s, "Recall of a branch's write", err)
		_, err = s.CreateBranch(ctx, store.CreateBranchInput{ID: uuid.New()})
		damaged(t, s, "CreateBranch of a given id", err)
	})
}

// A remembered result (the requests table's result column) that does not
// decode is a row historyd wrote and cannot read back: DATA_LOSS and the
// store's health, as a message row that does not decode is (damagedRowError),
// not INTERNAL.
func TestARememberedResultThatDoesNotDecodeIsDamage(t *testing.T) {
	dirs := map[store.Store]string{}
	storetest.RememberedResultDamage(t,
		func(t *testing.T) store.Store {
			dir := filepath.Join(t.TempDir(), "data")
			s := open(t, dir)
			dirs[s] = dir
			return s
		},
		func(t *testing.T, st store.Store, op store.Op, text string) store.Store {
			dir := dirs[st]
			if err := st.(*Store).Close(); err != nil {
				t.Fatal(err)
			}
			raw, err := sql.Open("sqlite", "file:"+filepath.Join(dir, FileName))
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			if res, err := raw.Exec(`UPDATE requests SET result = ? WHERE op = ?`, text, string(op)); err != nil {
				t.Fatal(err)
			} else if n, _ := res.RowsAffected(); n != 1 {
				t.Fatalf("%d records of %s, want 1", n, op)
			}
			s := open(t, dir)
			t.Cleanup(func() { s.Close() })
			return s
		},
		func(t *testing.T, st store.Store) {
			if _, unusable := st.(*Store).Health(); !errors.Is(unusable, store.ErrStorageDamaged) {
				t.Errorf("health says %v, want the damage", unusable)
			}
		})
}
