package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/google/uuid"
	_ "modernc.org/sqlite" // the engine's own driver, for the bulk copy

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/sqlite"
)

// Database generation for the start-time figure (issue 14: "time from start to SERVING on a
// database of 1M messages"). Writing 1M messages through AddMessage takes minutes on 2 cores, in
// this process or over gRPC (the engine writes about 3-5k 1 KB messages a second here), which
// make bench cannot spend on a fixture. So the database is made in two steps:
//
//  1. seed: genSeedBranches branches of genSeedMessages 1 KB instructions each, written through
//     the engine's own Store API in this process (sqlite.OpenStore, AddMessage from many
//     goroutines): real rows, real event logs;
//  2. copies: each seed branch copied, with INSERT ... SELECT, under new branch ids and
//     incarnations (its branch row, its messages, its retained events), until the database holds
//     n messages.
//
// The copies are rows the engine reads like any other (the bench lists a copied branch before it
// measures, to check that). What they hold does not matter to the figure: the point is that a
// start reads no message row, so the time to SERVING must not depend on how many there are.
// This file is the one place the bench imports internal/ (doc.go), and the one that knows the
// schema (internal/store/migrations/sqlite): which columns are a branch's identity. It builds a
// fixture and measures nothing.
const (
	genSeedBranches = 10
	genSeedMessages = 1_000
)

// generateDatabase writes a sqlite database of about n 1 KB instructions (a multiple of the seed's
// messages, at least one seed) into dir and returns the messages it holds and the id of one copied
// branch.
func generateDatabase(ctx context.Context, dir string, n int) (int, string, error) {
	return generate(ctx, dir, n, genSeedMessages)
}

// generate is generateDatabase with seed branches of at most seedMax messages.
func generate(ctx context.Context, dir string, n, seedMax int) (int, string, error) {
	seedPer := min(seedMax, max(n/genSeedBranches, 1))
	seed, err := seedDatabase(ctx, dir, genSeedBranches, seedPer)
	if err != nil {
		return 0, "", err
	}
	perSeed := genSeedBranches * seedPer
	copies := max(n/perSeed-1, 0)
	last, err := copyBranches(ctx, filepath.Join(dir, sqlite.FileName), seed, copies)
	if err != nil {
		return 0, "", fmt.Errorf("copying the seed branches: %w", err)
	}
	if last == "" {
		last = seed[0].String()
	}
	return perSeed * (copies + 1), last, nil
}

// seedDatabase writes branches branches of per messages each through the Store API.
func seedDatabase(ctx context.Context, dir string, branches, per int) ([]uuid.UUID, error) {
	st, err := sqlite.OpenStore(ctx, sqlite.StoreConfig{Config: sqlite.Config{Dir: dir, Sync: sqlite.SyncNormal}})
	if err != nil {
		return nil, err
	}
	ids := make([]uuid.UUID, branches)
	for i := range ids {
		res, err := st.CreateBranch(ctx, store.CreateBranchInput{System: jsonv.StringValue("You are a benchmark.")})
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		ids[i] = res.Branch.ID
	}
	// 64 writers, so that the engine's writer commits large batches.
	err = forEach(ctx, 64, branches*per, func(ctx context.Context, i int) error {
		in := store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(strconv.Itoa(i) + " " + kilobyteText)}}
		_, err := st.AddMessage(ctx, ids[i%branches], in, store.WriteOptions{})
		return err
	})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("seeding the database: %w", err)
	}
	return ids, nil
}

// copyStatements builds the copy statements from the schema the database has
// (pragma_table_info), so that they follow the engine's migrations: every column copied as it
// is, but a branch's id (?1) and incarnation (?2), its messages' branch_id (?1) and its events'
// incarnation (?2); the source branch is ?3.
func copyStatements(ctx context.Context, db *sql.DB) ([]string, error) {
	tables := []struct {
		name, where string
		replace     map[string]string
	}{
		{"branches", "id = ?3", map[string]string{"id": "?1", "incarnation": "?2"}},
		{"messages", "branch_id = ?3", map[string]string{"branch_id": "?1"}},
		{"events", "incarnation = (SELECT incarnation FROM branches WHERE tenant = '' AND id = ?3)", map[string]string{"incarnation": "?2"}},
	}
	var stmts []string
	for _, t := range tables {
		rows, err := db.QueryContext(ctx, "SELECT name FROM pragma_table_info(?)", t.name)
		if err != nil {
			return nil, err
		}
		var cols, exprs []string
		for rows.Next() {
			var c string
			if err := rows.Scan(&c); err != nil {
				rows.Close()
				return nil, err
			}
			q := `"` + c + `"` // quoted: a column may be a keyword of SQLite's (rank)
			cols, exprs = append(cols, q), append(exprs, q)
			if r, ok := t.replace[c]; ok {
				exprs[len(exprs)-1] = r
			}
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, err
		}
		if len(cols) == 0 {
			return nil, fmt.Errorf("no table %s in the database", t.name)
		}
		stmts = append(stmts, fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s WHERE tenant = '' AND %s",
			t.name, strings.Join(cols, ", "), strings.Join(exprs, ", "), t.name, t.where))
	}
	return stmts, nil
}

// copyBranches copies each seed branch copies times, one transaction per round, with fsyncs off
// (a fixture: a crash while making it only means making it again), and returns the last copy's
// id.
func copyBranches(ctx context.Context, path string, seed []uuid.UUID, copies int) (string, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(OFF)&_pragma=busy_timeout(10000)")
	if err != nil {
		return "", err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	stmts, err := copyStatements(ctx, db)
	if err != nil {
		return "", err
	}
	var last string
	for range copies {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		for _, src := range seed {
			id, inc := uuid.New(), uuid.New()
			for _, q := range stmts {
				if _, err := tx.ExecContext(ctx, q, id[:], inc[:], src[:]); err != nil {
					_ = tx.Rollback()
					return "", err
				}
			}
			last = id.String()
		}
		if err := tx.Commit(); err != nil {
			return "", err
		}
	}
	// Leave the database as a stopped historyd leaves it: the WAL checkpointed into the file.
	if _, err := db.ExecContext(ctx, "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		return "", err
	}
	return last, nil
}
