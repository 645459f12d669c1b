package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// migrateSchema applies the PostgreSQL migrations' Up parts to schema, as the engine would.
func migrateSchema(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string) {
	t.Helper()
	dir := "../../internal/store/migrations/postgres"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		b, err := os.ReadFile(dir + "/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		up, _, _ := strings.Cut(string(b), "-- +goose Down")
		if _, err := pool.Exec(ctx, "SET search_path = "+schema+";\n"+up+";\nRESET search_path"); err != nil {
			t.Fatalf("%s: %v", e.Name(), err)
		}
	}
}

// writeBlock writes a branch of k messages as the engine writes AddMessage's rows (the sqlite
// engine's, the same schema): BRANCH_CREATED at sequence 1, then one event per message, its body
// NULL while the message is current; positions and ranks from 0.
func writeBlock(t *testing.T, ctx context.Context, pool *pgxpool.Pool, schema string, branch, inc uuid.UUID, k int) {
	t.Helper()
	q := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, strings.ReplaceAll(sql, "S.", schema+"."), args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	q(`INSERT INTO S.branches (id, incarnation, created_at, metadata, pile_id, pile_created_at, prog_id, prog_created_at, head, next_pos, next_rank, message_count)
		VALUES ($1, $2, 1, '{}', gen_random_uuid(), 1, gen_random_uuid(), 1, $3, $4, $4, $4)`, branch, inc, k+1, k)
	q(`INSERT INTO S.events (incarnation, seq, commit_first, commit_last, kind, msg_index, body) VALUES ($1, 1, 1, 1, 1, -1, '{}')`, inc)
	for i := range k {
		id := uuid.New()
		q(`INSERT INTO S.messages (branch_id, id, pos, kind, rank, seq, body) VALUES ($1, $2, $3, 1, $3, $4, $5)`,
			branch, id, i, i+2, fmt.Sprintf(`{"id":"%s","content":{"instruction":"%d"}}`, id, i))
		q(`INSERT INTO S.events (incarnation, seq, commit_first, commit_last, kind, msg_index, msg_id) VALUES ($1, $2, $2, $2, 2, $3, $4)`,
			inc, i+2, i, id)
	}
}

// The convoy's seed (issue 16: "a direct SQL seed consistent with the schema") copies a written
// block onto the end of its branch: contiguous positions, one event per message with the sequence
// of its message's row, the retained events only, the branch's counters, each copy's id inside its
// body; another branch untouched.
func TestExtendBranch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := pgtest.URL(t)
	schema := pgtest.Schema(t, base)
	pool, _, err := connectPostgresConns(ctx, base, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	migrateSchema(t, ctx, pool, schema)
	const k, want = 50, 25_000 // 500 blocks: past the 20,000 events the log holds
	branch, inc := uuid.New(), uuid.New()
	other, otherInc := uuid.New(), uuid.New()
	writeBlock(t, ctx, pool, schema, branch, inc, k)
	writeBlock(t, ctx, pool, schema, other, otherInc, 3)

	n, err := extendBranch(ctx, pool, schema, branch, want+k/2) // rounded down to whole blocks
	if err != nil {
		t.Fatal(err)
	}
	if n != want {
		t.Fatalf("extendBranch: %d messages, want %d", n, want)
	}
	one := func(sql string, args ...any) int64 {
		t.Helper()
		var v int64
		if err := pool.QueryRow(ctx, strings.ReplaceAll(sql, "S.", schema+"."), args...).Scan(&v); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return v
	}
	head := int64(want + 1)
	for _, c := range []struct {
		what string
		got  int64
		want int64
	}{
		{"messages", one(`SELECT count(*) FROM S.messages WHERE branch_id = $1`, branch), want},
		{"distinct positions 0..n-1", one(`SELECT count(DISTINCT pos) FROM S.messages WHERE branch_id = $1 AND pos BETWEEN 0 AND $2`, branch, want-1), want},
		{"distinct ranks", one(`SELECT count(DISTINCT rank) FROM S.messages WHERE branch_id = $1`, branch), want},
		{"distinct ids", one(`SELECT count(DISTINCT id) FROM S.messages WHERE branch_id = $1`, branch), want},
		{"sequences 2..head", one(`SELECT count(DISTINCT seq) FROM S.messages WHERE branch_id = $1 AND seq BETWEEN 2 AND $2`, branch, head), want},
		{"bodies naming their own id", one(`SELECT count(*) FROM S.messages WHERE branch_id = $1 AND body LIKE '{"id":"' || id::text || '"%'`, branch), want},
		{"version 4 ids", one(`SELECT count(*) FROM S.messages WHERE branch_id = $1 AND substr(id::text, 15, 1) = '4'`, branch), want},
		{"branch head", one(`SELECT head FROM S.branches WHERE id = $1`, branch), head},
		{"next_pos", one(`SELECT next_pos FROM S.branches WHERE id = $1`, branch), want},
		{"next_rank", one(`SELECT next_rank FROM S.branches WHERE id = $1`, branch), want},
		{"message_count", one(`SELECT message_count FROM S.branches WHERE id = $1`, branch), want},
		{"retained events", one(`SELECT count(*) FROM S.events WHERE incarnation = $1`, inc), pgEventsKept},
		{"oldest retained event", one(`SELECT min(seq) FROM S.events WHERE incarnation = $1`, inc), head - pgEventsKept + 1},
		{"newest event", one(`SELECT max(seq) FROM S.events WHERE incarnation = $1`, inc), head},
		// Every retained event names the message written at its sequence and index.
		{"events matching their message", one(`SELECT count(*) FROM S.events e JOIN S.messages m
			ON m.tenant = '' AND m.branch_id = $1 AND m.id = e.msg_id AND m.seq = e.seq AND m.pos = e.msg_index AND e.commit_first = e.seq AND e.commit_last = e.seq
			WHERE e.incarnation = $2 AND e.body IS NULL`, branch, inc), pgEventsKept},
		{"other branch's messages", one(`SELECT count(*) FROM S.messages WHERE branch_id = $1`, other), 3},
		{"other branch's events", one(`SELECT count(*) FROM S.events WHERE incarnation = $1`, otherInc), 4},
		{"other branch's head", one(`SELECT head FROM S.branches WHERE id = $1`, other), 4},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d, want %d", c.what, c.got, c.want)
		}
	}
}

// A block that is not what the copy expects (here a branch with a system message) is refused,
// nothing written: the copy would write rows the engine misreads.
func TestExtendBranchRefusesUnexpectedBlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := pgtest.URL(t)
	schema := pgtest.Schema(t, base)
	pool, _, err := connectPostgresConns(ctx, base, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	migrateSchema(t, ctx, pool, schema)
	branch, inc := uuid.New(), uuid.New()
	writeBlock(t, ctx, pool, schema, branch, inc, 10)
	if _, err := pool.Exec(ctx, "UPDATE "+schema+".branches SET system_id = gen_random_uuid() WHERE id = $1", branch); err != nil {
		t.Fatal(err)
	}
	_, err = extendBranch(ctx, pool, schema, branch, 100)
	if err == nil || !strings.Contains(err.Error(), "system message") {
		t.Fatalf("extendBranch on a branch with a system: %v, want a refusal naming it", err)
	}
	var n int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema+".messages").Scan(&n); err != nil || n != 10 {
		t.Fatalf("messages after the refusal: %d (%v), want the 10 written", n, err)
	}
}
