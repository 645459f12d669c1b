package main

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strconv"

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
// schema (internal/store/migrations/sqlite); it builds a fixture and measures nothing.
const (
	genSeedBranches = 10
	genSeedMessages = 1_000
)

// generateDatabase writes a sqlite database of about n 1 KB instructions (a multiple of the seed's
// messages, at least one seed) into dir and returns the messages it holds and the id of one copied
// branch.
func generateDatabase(ctx context.Context, dir string, n int) (int, string, error) {
	seedPer := min(genSeedMessages, max(n/genSeedBranches, 1))
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

// The copy statements, with the columns of migration 00001 named, so that a later additive
// migration (a new column with a default) leaves them working.
const (
	copyBranch = `INSERT INTO branches (tenant, id, incarnation, created_at, metadata, name, user_name,
		parent_id, fork_point, pile_id, pile_created_at, prog_id, prog_created_at, head, epoch,
		sel_epoch, selected, system_id, next_pos, next_rank, message_count)
	SELECT tenant, ?1, ?2, created_at, metadata, name, user_name, parent_id, fork_point, pile_id,
		pile_created_at, prog_id, prog_created_at, head, epoch, sel_epoch, selected, system_id,
		next_pos, next_rank, message_count
	FROM branches WHERE tenant = '' AND id = ?3`
	copyMessages = `INSERT INTO messages (tenant, branch_id, id, pos, kind, rank, seq, body)
	SELECT tenant, ?1, id, pos, kind, rank, seq, body FROM messages WHERE tenant = '' AND branch_id = ?2`
	copyEvents = `INSERT INTO events (tenant, incarnation, seq, commit_first, commit_last, kind, msg_index, body)
	SELECT tenant, ?1, seq, commit_first, commit_last, kind, msg_index, body FROM events
	WHERE tenant = '' AND incarnation = (SELECT incarnation FROM branches WHERE tenant = '' AND id = ?2)`
)

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
	var last string
	for range copies {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return "", err
		}
		for _, src := range seed {
			id, inc := uuid.New(), uuid.New()
			for _, step := range []struct {
				q    string
				args []any
			}{
				{copyBranch, []any{id[:], inc[:], src[:]}},
				{copyMessages, []any{id[:], src[:]}},
				{copyEvents, []any{inc[:], src[:]}},
			} {
				if _, err := tx.ExecContext(ctx, step.q, step.args...); err != nil {
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
