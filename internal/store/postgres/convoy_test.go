package postgres

import (
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
	"github.com/historyd/historyd/internal/store/sqlrow"
	"github.com/historyd/historyd/internal/store/storetest"
)

// Issue 16, "No convoys": "nothing lost and every acknowledged message at
// its own index when 50 appenders write to one branch of 100k messages".
// An append reads the branch's row and nothing of its history, so the
// 100k rows cost it nothing; the latency figure is the bench's.
func TestConvoy(t *testing.T) {
	const (
		seeded    = 100_000
		appenders = 50
		each      = 20
	)
	url := pgtest.New(t)
	cfg := testConfig(url, storetest.Options{})
	cfg.MaxConns = 8
	s := openReady(t, cfg)
	br := newBranch(t, s)
	seed(t, s, br, seeded)

	start := time.Now()
	var (
		mu    sync.Mutex
		acked []store.WriteResult
		wg    sync.WaitGroup
	)
	for w := range appenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				res, err := s.AddMessage(tctx(t), br, store.AddInput{Factory: addFactory(msgText(w*1000 + i))}, store.WriteOptions{})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				acked = append(acked, res)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("%d appends by %d appenders to a branch of %d messages in %v", len(acked), appenders, seeded, time.Since(start))

	seen := map[uint64]bool{}
	for _, res := range acked {
		if seen[res.Head] {
			t.Fatalf("head %d acked twice", res.Head)
		}
		seen[res.Head] = true
	}
	for seq := uint64(2); seq <= uint64(1+len(acked)); seq++ {
		if !seen[seq] {
			t.Fatalf("no acked write has sequence %d: a gap", seq)
		}
	}
	// The newest entries, newest first: each acked message at its index.
	p, err := s.ListMessages(tctx(t), br, store.ListInput{PageSize: 1000, Descending: true})
	if err != nil {
		t.Fatal(err)
	}
	total := seeded + len(acked)
	at := map[uuid.UUID]int{}
	for i, m := range p.Messages {
		at[m.Message.ID] = total - 1 - i
	}
	for _, res := range acked {
		if idx, ok := at[res.Message.Message.ID]; !ok || idx != res.Index || res.Index < seeded {
			t.Fatalf("message %s acked at index %d is at %d (found %v)", res.Message.Message.ID, res.Index, idx, ok)
		}
	}
	info, err := s.GetBranch(tctx(t), br)
	if err != nil || info.MessageCount != total || info.HeadSequence != uint64(1+len(acked)) {
		t.Fatalf("branch after the convoy: %+v, %v; want %d messages, head %d", info, err, total, 1+len(acked))
	}
}

// seed gives a branch n instructions as if it had been created with them
// (one INSERT ... SELECT generate_series, seq 1: its BRANCH_CREATED), each
// a copy of a real message's row with its own id.
func seed(t testing.TB, s *Store, br uuid.UUID, n int) {
	t.Helper()
	tmpl := add(t, s, br, "template", store.WriteOptions{})
	ctx := tctx(t)
	tid := tmpl.Message.Message.ID
	_, err := s.pool.Exec(ctx, `DELETE FROM messages WHERE branch_id = $1`, br)
	if err == nil {
		_, err = s.pool.Exec(ctx, `DELETE FROM events WHERE seq > 1 AND incarnation = (SELECT incarnation FROM branches WHERE id = $1)`, br)
	}
	if err == nil {
		_, err = s.pool.Exec(ctx, `
			WITH t AS (SELECT $2::text AS body, $3::bigint AS kind, $1::uuid AS br)
			INSERT INTO messages (tenant, branch_id, id, pos, kind, rank, seq, body)
			SELECT '', t.br, md5(t.br::text || i)::uuid, i, t.kind, i, 1, replace(t.body, $4::text, md5(t.br::text || i)::uuid::text)
			FROM generate_series(0, $5::bigint - 1) AS i, t`,
			br, mustBody(t, tmpl), int64(tmpl.Message.Message.Kind()), tid.String(), n)
	}
	if err == nil {
		_, err = s.pool.Exec(ctx, `UPDATE branches SET head = 1, next_pos = $2, next_rank = $2, message_count = $2 WHERE id = $1`, br, n)
	}
	if err != nil {
		t.Fatal(err)
	}
}

func mustBody(t testing.TB, res store.WriteResult) string {
	t.Helper()
	b, err := sqlrow.EncodeMessage(res.Message.Message)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
