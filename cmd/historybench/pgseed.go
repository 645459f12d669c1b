package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The convoy row's 100k-message branch (issue 16). Writing it through AddMessage on one branch
// takes minutes, and ImportBranch in chunks is slower still, so it is made the way dbgen.go makes
// the sqlite start figure's database: historyd writes a block of real messages itself (its own
// rows, its own events), then SQL copies that block onto the end of the same branch, under new
// message ids, until the branch holds n messages, and brings the branch row's counters along. The
// copies are what historyd would have written had it been given the same instructions again:
//
//   - messages: the block's rows, each copy c with a new id (derived from the old one and c, so
//     that the events can name it), pos, rank and seq shifted by c blocks, and the id inside the
//     body (LionAGI's to_dict) replaced by the new one;
//   - events: the block's events shifted the same way, only those the engine's log holds at the
//     new head (pgEventsKept), the block's own older ones deleted, as the engine trims its log on
//     every write: so the first measured write finds no backlog to delete;
//   - the branch row: head, next_pos, next_rank and message_count as the engine keeps them.
//
// Every other column is copied as it is, read from information_schema, so a later migration's
// column follows. It checks first that the block is what this file expects (a branch without a
// system, one event per message, positions from 0), and fails saying so otherwise, rather than
// write rows the engine would misread; the row then checks the result through historyd
// (scen_pg_convoy.go). A fixture, built with synchronous_commit off; nothing here is measured.

// pgEventsKept is the events a branch's log holds in the PostgreSQL engine at any head past it:
// twice store.DefaultEventRetention (10,000, historyd's default), as its writes sweep only below
// the retention's start less one retention (internal/store/postgres, sweepBelow). The bench does
// not import internal/ outside dbgen.go, so the figure is written here.
const pgEventsKept = 2 * 10_000

// pgNewID is the SQL of copy g.c's id for the id col: a version 4 UUID made from md5 of the old
// id and the copy's number, so that a message's row and its event's msg_id agree.
func pgNewID(col string) string {
	return fmt.Sprintf("overlay(overlay(md5(%s::text || ':' || g.c) placing '4' from 13) placing '8' from 17)::uuid", col)
}

// seedBlock describes the written block the copies repeat.
type seedBlock struct {
	incarnation            uuid.UUID
	head                   int64 // the branch's head: the block's last event
	nextPos, nextRank      int64 // the branch row's counters
	count                  int64 // the block's messages
	minPos, maxPos         int64
	minRank, maxRank       int64
	minSeq, maxSeq, events int64 // the messages' sequences; the events in that range that name a message
}

// readSeedBlock reads and checks the block of branch in the transaction.
func readSeedBlock(ctx context.Context, tx pgx.Tx, branch uuid.UUID) (seedBlock, error) {
	var s seedBlock
	var system *uuid.UUID
	var messageCount int64
	err := tx.QueryRow(ctx, `SELECT incarnation, head, next_pos, next_rank, message_count, system_id
		FROM branches WHERE tenant = '' AND id = $1`, branch).Scan(&s.incarnation, &s.head, &s.nextPos, &s.nextRank, &messageCount, &system)
	if err != nil {
		return s, fmt.Errorf("the branch's row: %w", err)
	}
	err = tx.QueryRow(ctx, `SELECT count(*), coalesce(min(pos), 0), coalesce(max(pos), -1), coalesce(min(rank), 0),
		coalesce(max(rank), -1), coalesce(min(seq), 0), coalesce(max(seq), -1)
		FROM messages WHERE tenant = '' AND branch_id = $1`, branch).Scan(&s.count, &s.minPos, &s.maxPos, &s.minRank, &s.maxRank, &s.minSeq, &s.maxSeq)
	if err != nil {
		return s, fmt.Errorf("the branch's messages: %w", err)
	}
	err = tx.QueryRow(ctx, `SELECT count(*) FROM events WHERE tenant = '' AND incarnation = $1 AND seq BETWEEN $2 AND $3 AND msg_id IS NOT NULL`,
		s.incarnation, s.minSeq, s.maxSeq).Scan(&s.events)
	if err != nil {
		return s, fmt.Errorf("the branch's events: %w", err)
	}
	var problems []string
	if system != nil {
		problems = append(problems, "the branch has a system message")
	}
	if s.count == 0 || s.count != messageCount {
		problems = append(problems, fmt.Sprintf("%d message rows, message_count %d", s.count, messageCount))
	}
	if s.minPos != 0 || s.maxPos != s.count-1 || s.nextPos != s.count {
		problems = append(problems, fmt.Sprintf("positions %d to %d, next_pos %d, want 0 to %d and %d", s.minPos, s.maxPos, s.nextPos, s.count-1, s.count))
	}
	if s.maxRank >= s.nextRank {
		problems = append(problems, fmt.Sprintf("ranks up to %d, next_rank %d", s.maxRank, s.nextRank))
	}
	if s.maxSeq != s.head || s.maxSeq-s.minSeq+1 != s.count || s.events != s.count {
		problems = append(problems, fmt.Sprintf("message sequences %d to %d, head %d, %d events naming a message in that range, want one each up to the head",
			s.minSeq, s.maxSeq, s.head, s.events))
	}
	if len(problems) > 0 {
		return s, fmt.Errorf("the seed block is not as pgseed.go expects (%s): the engine's rows changed, update the copy", strings.Join(problems, "; "))
	}
	return s, nil
}

// columns returns the quoted columns of table in the transaction's schema, in order.
func columns(ctx context.Context, tx pgx.Tx, table string) ([]string, error) {
	rows, err := tx.Query(ctx, `SELECT column_name FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = $1 ORDER BY ordinal_position`, table)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("no table %s in schema", table)
	}
	return names, nil
}

// copySelect builds INSERT INTO table (cols) SELECT exprs FROM table CROSS JOIN the copies g(c)
// WHERE where: every column as it is, but those in replace.
func copySelect(cols []string, table, where string, replace map[string]string) string {
	exprs := make([]string, len(cols))
	quoted := make([]string, len(cols))
	for i, c := range cols {
		quoted[i] = pgx.Identifier{c}.Sanitize()
		exprs[i] = "t." + quoted[i]
		if r, ok := replace[c]; ok {
			exprs[i] = r
		}
	}
	return fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM %s t CROSS JOIN generate_series(1, $2::bigint) AS g(c) WHERE %s",
		table, strings.Join(quoted, ", "), strings.Join(exprs, ", "), table, where)
}

// extendBranch copies branch's block onto its end in schema until it holds n messages (rounded
// down to whole blocks, at least the block) and returns how many it holds.
func extendBranch(ctx context.Context, pool *pgxpool.Pool, schema string, branch uuid.UUID, n int) (int, error) {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // after a commit it does nothing
	for _, q := range []string{
		"SET LOCAL synchronous_commit = off", // a fixture: a crash only means making it again
		"SET LOCAL search_path = " + pgx.Identifier{schema}.Sanitize(),
	} {
		if _, err := tx.Exec(ctx, q); err != nil {
			return 0, err
		}
	}
	s, err := readSeedBlock(ctx, tx, branch)
	if err != nil {
		return 0, err
	}
	copies := max(int64(n)/s.count-1, 0)
	if copies == 0 {
		return int(s.count), tx.Commit(ctx)
	}
	k := s.count // messages, positions and sequences a copy adds
	dRank := s.nextRank - s.minRank
	head := s.head + copies*k
	msgCols, err := columns(ctx, tx, "messages")
	if err != nil {
		return 0, err
	}
	evCols, err := columns(ctx, tx, "events")
	if err != nil {
		return 0, err
	}
	insertMessages := copySelect(msgCols, "messages", "t.tenant = '' AND t.branch_id = $1", map[string]string{
		"id":   pgNewID("t.id"),
		"pos":  "t.pos + g.c * $3::bigint",
		"rank": "t.rank + g.c * $4::bigint",
		"seq":  "t.seq + g.c * $3",
		"body": "replace(t.body, t.id::text, (" + pgNewID("t.id") + ")::text)",
	})
	if _, err := tx.Exec(ctx, insertMessages, branch, copies, k, dRank); err != nil {
		return 0, fmt.Errorf("copying the messages: %w", err)
	}
	// Only the events the log retains at the new head, from $5 on; $4 to $6 are the block's.
	retained := max(head-pgEventsKept+1, 1)
	insertEvents := copySelect(evCols, "events",
		"t.tenant = '' AND t.incarnation = $1 AND t.seq BETWEEN $4 AND $6 AND t.seq + g.c * $3 >= $5", map[string]string{
			"seq":          "t.seq + g.c * $3",
			"commit_first": "t.commit_first + g.c * $3",
			"commit_last":  "t.commit_last + g.c * $3",
			"msg_index":    "CASE WHEN t.msg_index >= 0 THEN t.msg_index + g.c * $3 ELSE t.msg_index END",
			"msg_id":       "CASE WHEN t.msg_id IS NULL THEN NULL ELSE " + pgNewID("t.msg_id") + " END",
		})
	if _, err := tx.Exec(ctx, insertEvents, s.incarnation, copies, k, s.minSeq, retained, s.maxSeq); err != nil {
		return 0, fmt.Errorf("copying the events: %w", err)
	}
	if _, err := tx.Exec(ctx, "DELETE FROM events WHERE tenant = '' AND incarnation = $1 AND seq < $2", s.incarnation, retained); err != nil {
		return 0, fmt.Errorf("trimming the events: %w", err)
	}
	tag, err := tx.Exec(ctx, `UPDATE branches SET head = $2, next_pos = next_pos + $3::bigint * $4::bigint,
		next_rank = next_rank + $3::bigint * $5::bigint, message_count = message_count + $3::bigint * $4::bigint WHERE tenant = '' AND id = $1`, branch, head, copies, k, dRank)
	if err != nil {
		return 0, fmt.Errorf("updating the branch's row: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return 0, errors.New("updating the branch's row: no row")
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, err
	}
	// The planner's statistics of a table that grew by 100k rows at once, as autovacuum would
	// gather them soon after.
	if _, err := pool.Exec(ctx, fmt.Sprintf("ANALYZE %[1]s.messages, %[1]s.events, %[1]s.branches", pgx.Identifier{schema}.Sanitize())); err != nil {
		return 0, err
	}
	return int(k * (copies + 1)), nil
}
