package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// pgConvoySeedBlock is how many messages historyd writes itself on the convoy's branch before SQL
// copies them (pgseed.go).
const pgConvoySeedBlock = 100

// pgConvoyRowName names issue 16's convoy row.
func pgConvoyRowName(n int) string {
	return fmt.Sprintf("AddMessage latency (p99), %d appenders on one branch of %s messages / on a fresh branch, PostgreSQL engine",
		engineConcurrency, count(n))
}

// benchPGConvoy measures the p99 latency of AddMessage from 50 appenders on one branch of
// cfg.ConvoyMessages messages over the p99 of the same 50 appenders on a fresh branch (issue 16:
// "No convoys: an append never reads the branch's history ... p99 AddMessage latency <= 2x the p99
// of the same on a fresh branch"). One historyd, pool -postgres-max-conns, on a schema of its own;
// the big branch is seeded as pgseed.go says and checked through historyd before it is measured;
// the fresh branch is a new one each run, deleted after. The two alternate which goes first.
func benchPGConvoy(ctx context.Context, b *bench, e *pgEnv) ([]row, error) {
	schema, drop, err := b.newSchema(ctx, e)
	if err != nil {
		return nil, err
	}
	defer drop()
	conns := b.cfg.PostgresMaxConns
	t0 := time.Now()
	big, n, err := b.seedConvoy(ctx, e, schema, conns)
	if err != nil {
		return nil, fmt.Errorf("convoy seed: %w", err)
	}
	seeded := time.Since(t0)
	b.progress("convoy: branch of %d messages seeded in %v", n, seeded.Round(100*time.Millisecond))
	// A server that has not written the branch: what it knows of it comes from the database.
	s, err := b.startPostgres(ctx, e, schema, conns)
	if err != nil {
		return nil, err
	}
	defer s.stop()
	if err := checkSeeded(ctx, e, s, big, n); err != nil {
		return nil, err
	}
	appenders := func(branch string, minIndex uint64) func() (latencies, error) {
		return func() (latencies, error) {
			return appendLatencies(ctx, s.historyd, branch, minIndex, b.cfg.Duration)
		}
	}
	onBig := appenders(big.String(), uint64(n))
	onFresh := func() (latencies, error) {
		ids, err := createBranches(ctx, s.historyd, 1)
		if err != nil {
			return latencies{}, err
		}
		defer deleteBranches(ctx, s.historyd, ids)
		return appenders(ids[0], 0)()
	}
	if _, err := onBig(); err != nil { // warm-up: connections, prepared statements, caches
		return nil, err
	}
	if _, err := onFresh(); err != nil {
		return nil, err
	}
	var rs, bigP99, freshP99, bigP50, freshP50, bigRate, freshRate []float64
	for run := range b.cfg.Runs {
		var x, y latencies
		if run%2 == 0 {
			if x, err = onBig(); err == nil {
				y, err = onFresh()
			}
		} else {
			if y, err = onFresh(); err == nil {
				x, err = onBig()
			}
		}
		if err != nil {
			return nil, err
		}
		rs = append(rs, float64(x.p99)/float64(y.p99))
		bigP99, freshP99 = append(bigP99, ms(x.p99)), append(freshP99, ms(y.p99))
		bigP50, freshP50 = append(bigP50, ms(x.p50)), append(freshP50, ms(y.p50))
		bigRate, freshRate = append(bigRate, x.perSecond), append(freshRate, y.perSecond)
		b.progress("convoy run %d: p99 %.1f ms on the big branch, %.1f ms on a fresh one = %.2f (p50 %.1f / %.1f ms, %.0f/s / %.0f/s)",
			run+1, ms(x.p99), ms(y.p99), float64(x.p99)/float64(y.p99), ms(x.p50), ms(y.p50), x.perSecond, y.perSecond)
	}
	r := row{
		Name: pgConvoyRowName(b.cfg.ConvoyMessages), Unit: "ratio", Runs: rs,
		Detail: fmt.Sprintf("p99 %.1f ms / %.1f ms, p50 %.1f ms / %.1f ms, %.0f/s / %.0f/s",
			summarize(bigP99).Median, summarize(freshP99).Median, summarize(bigP50).Median, summarize(freshP50).Median,
			summarize(bigRate).Median, summarize(freshRate).Median),
		Note: fmt.Sprintf("one historyd, `--postgres-max-conns %d`, 1 KB instructions; the big branch: %d messages written through historyd, "+
			"copied by SQL onto the same branch to %d (its rows, retained events and counters; pgseed.go) in %v, then checked through a server that had not written it",
			conns, pgConvoySeedBlock, n, seeded.Round(100*time.Millisecond)),
	}
	r.Target, r.meets = atMost(2.0)
	if r.Met() == "NO" && b.cfg.Profile {
		r.Profile, err = b.cpuProfile(ctx, s.historyd, func(ctx context.Context) error {
			_, err := appendLatencies(ctx, s.historyd, big.String(), uint64(n), b.profileDuration())
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return []row{r}, nil
}

// seedConvoy makes the convoy's branch in schema: pgConvoySeedBlock messages written through a
// historyd that is then stopped, copied to cfg.ConvoyMessages by SQL. It returns the branch and
// how many messages it holds.
func (b *bench) seedConvoy(ctx context.Context, e *pgEnv, schema string, conns int) (uuid.UUID, int, error) {
	s, err := b.startPostgres(ctx, e, schema, conns)
	if err != nil {
		return uuid.UUID{}, 0, err
	}
	ids, err := createBranches(ctx, s.historyd, 1)
	if err == nil {
		block := min(pgConvoySeedBlock, b.cfg.ConvoyMessages)
		err = forEach(ctx, engineConcurrency, block, func(ctx context.Context, i int) error {
			_, err := s.Client.History.AddMessage(ctx, addRequest(ids[0], i))
			return err
		})
	}
	if serr := s.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return uuid.UUID{}, 0, err
	}
	branch, err := uuid.Parse(ids[0])
	if err != nil {
		return uuid.UUID{}, 0, err
	}
	n, err := extendBranch(ctx, e.admin, schema, branch, b.cfg.ConvoyMessages)
	return branch, n, err
}

// checkSeeded checks the seeded branch through historyd: its count, and its last message (a copy)
// read by id, as the database holds it.
func checkSeeded(ctx context.Context, e *pgEnv, s *pgServer, branch uuid.UUID, n int) error {
	resp, err := s.Client.History.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: branch.String()})
	if err != nil {
		return fmt.Errorf("convoy seed: GetBranch: %w", err)
	}
	if got := resp.GetBranch().GetMessageCount(); got != uint64(n) {
		return fmt.Errorf("convoy seed: historyd counts %d messages on the seeded branch, want %d", got, n)
	}
	var last uuid.UUID
	q := fmt.Sprintf("SELECT id FROM %s.messages WHERE tenant = '' AND branch_id = $1 ORDER BY pos DESC LIMIT 1", s.Schema)
	if err := e.admin.QueryRow(ctx, q, branch).Scan(&last); err != nil {
		return fmt.Errorf("convoy seed: %w", err)
	}
	list, err := s.Client.History.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: branch.String(), PageSize: 1, Descending: true})
	if err != nil {
		return fmt.Errorf("convoy seed: ListMessages: %w", err)
	}
	if m := list.GetMessages(); len(m) != 1 || m[0].GetId() != last.String() {
		return fmt.Errorf("convoy seed: historyd lists %v last, want the copied message %s", m, last)
	}
	return nil
}

// latencies is one closed-loop run's AddMessage latencies.
type latencies struct {
	p50, p99  time.Duration
	perSecond float64
}

// appendLatencies runs engineConcurrency appenders on branch for d and returns their latencies;
// every message must land at index minIndex or later (the branch's messages before the run).
func appendLatencies(ctx context.Context, h *historyd, branch string, minIndex uint64, d time.Duration) (latencies, error) {
	per := make([][]time.Duration, engineConcurrency) // per worker: no lock on the hot path
	r, err := closedLoop(ctx, engineConcurrency, d, func(ctx context.Context, w, i int) (int, error) {
		t0 := time.Now()
		resp, err := h.Client.History.AddMessage(ctx, addRequest(branch, i))
		per[w] = append(per[w], time.Since(t0))
		if err == nil && resp.GetIndex() < minIndex {
			err = fmt.Errorf("AddMessage answered index %d on a branch of %d messages", resp.GetIndex(), minIndex)
		}
		return 1, err
	})
	if err != nil {
		return latencies{}, err
	}
	var all []time.Duration
	for _, p := range per {
		all = append(all, p...)
	}
	return latencies{p50: percentile(all, 50), p99: percentile(all, 99), perSecond: r.PerSecond()}, nil
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
