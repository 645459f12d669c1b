package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The Exchange on the database engines (issue 17, "Benchmarks (make bench, ratios in one run)":
// "Send+Collect direct, 100 owners, concurrency 50: sqlite (--sync=normal) >= 0.6x the memory
// engine; postgres >= 0.3x the memory engine"). Each ratio compares two historyd processes running
// at once, the loads alternating which goes first (alternate), as the AddMessage engine rows do.

// exchangeEnginesRowName names the row of the engine named engine over the memory engine.
func exchangeEnginesRowName(owners int, engine string) string {
	return fmt.Sprintf("Exchange Send+Collect direct, %d owners, concurrency %d, %s / memory engine", owners, min(exchangeConcurrency, owners), engine)
}

// sqliteExchangeEngine and pgExchangeEngine are the engines the rows name.
const (
	sqliteExchangeEngine = "sqlite --sync=normal"
	pgExchangeEngine     = "PostgreSQL engine"
)

// exchangeDirectLoad registers owners new owners on h, then returns the load of one run: each of
// min(exchangeConcurrency, owners) workers, as an owner of its own, sends a direct message to
// another owner in turn and collects its outbox, which must deliver exactly that message (the
// worker alone sends as and collects its owner). A unit is one Send+Collect round, one message
// delivered. Nobody pops: each run adds about rounds/owners messages to each inbox, far below the
// per-inbox bound.
func exchangeDirectLoad(ctx context.Context, h *historyd, owners int, d time.Duration) (func() (measured, error), error) {
	ids := make([]string, owners)
	for i := range ids {
		ids[i] = uuid.NewString()
		if _, err := h.Client.Exchange.Register(ctx, &historyv1.RegisterRequest{OwnerId: ids[i]}); err != nil {
			return nil, fmt.Errorf("registering an owner: %w", err)
		}
	}
	content := `{"text": "hello", "n": 1}`
	conc := min(exchangeConcurrency, owners)
	round := func(ctx context.Context, w, i int) (int, error) {
		from, to := ids[w], ids[(w+1+i%(owners-1))%owners] // never the sender itself
		if _, err := h.Client.Exchange.Send(ctx, &historyv1.SendRequest{Sender: from, Recipient: client.Participant(to), ContentJson: &content}); err != nil {
			return 0, fmt.Errorf("sending: %w", err)
		}
		resp, err := h.Client.Exchange.Collect(ctx, &historyv1.CollectRequest{OwnerId: from})
		if err != nil {
			return 0, fmt.Errorf("collecting: %w", err)
		}
		if resp.GetCollectedCount() != 1 || resp.GetDeliveredCount() != 1 {
			return 0, fmt.Errorf("the collect of %s after one Send collected %d and delivered %d, want 1 and 1", from, resp.GetCollectedCount(), resp.GetDeliveredCount())
		}
		return 1, nil
	}
	return func() (measured, error) { return measure(ctx, h, conc, d, round) }, nil
}

// exchangeOverMemory measures the direct Send+Collect load on h over the same on a memory-engine
// historyd it starts, and returns the row of engine with the target at least target.
func exchangeOverMemory(ctx context.Context, b *bench, h *historyd, engine, note string, target float64) (row, error) {
	mem, err := startHistoryd(ctx, b.bin, b.memoryFlags()...)
	if err != nil {
		return row{}, err
	}
	defer mem.stop()
	x, err := exchangeDirectLoad(ctx, h, b.cfg.Owners, b.cfg.Duration)
	if err != nil {
		return row{}, fmt.Errorf("%s: %w", engine, err)
	}
	y, err := exchangeDirectLoad(ctx, mem, b.cfg.Owners, b.cfg.Duration)
	if err != nil {
		return row{}, fmt.Errorf("memory engine: %w", err)
	}
	if engine == pgExchangeEngine {
		x = withPostgresCPU(x)
	}
	xs, ys, err := alternate(b, "Exchange Send+Collect/s, "+engine+" over memory, c=50,", x, y)
	if err != nil {
		return row{}, err
	}
	rs, xr, yr, xc, yc := ratios(xs, ys)
	detail := fmt.Sprintf("%s %.0f rounds/s, memory %.0f rounds/s; server CPU a round %.0f µs / %.0f µs", engine, xr, yr, xc, yc)
	if engine == pgExchangeEngine {
		client := func(m measured) float64 { return m.ClientCPU }
		detail += fmt.Sprintf("; also a round: %s, the load generator %.0f µs / %.0f µs",
			postgresCPUDetail(medianOf(xs, func(m measured) float64 { return m.DBCPU })), medianOf(xs, client), medianOf(ys, client))
	}
	r := row{
		Name:   exchangeEnginesRowName(b.cfg.Owners, engine),
		Unit:   "ratio",
		Runs:   rs,
		Detail: detail,
		Note: fmt.Sprintf("two historyd processes; %d workers, each an owner of its own sending a direct message to another owner in turn, "+
			"then collecting its outbox (one delivery a round); %s", min(exchangeConcurrency, b.cfg.Owners), note),
	}
	r.Target, r.meets = atLeast(target)
	if r.Met() == "NO" && b.cfg.Profile {
		load, err := exchangeDirectLoad(ctx, h, b.cfg.Owners, b.profileDuration())
		if err != nil {
			return row{}, err
		}
		if r.Profile, err = b.cpuProfile(ctx, h, func(context.Context) error {
			_, err := load()
			return err
		}); err != nil {
			return row{}, err
		}
	}
	return r, nil
}

// benchSQLiteExchange is the sqlite row: a sqlite-engine historyd with --sync=normal over the
// memory engine, target at least 0.6.
func benchSQLiteExchange(ctx context.Context, b *bench) ([]row, error) {
	sq, err := b.startSQLite(ctx, "normal")
	if err != nil {
		return nil, err
	}
	r, err := exchangeOverMemory(ctx, b, sq.historyd, sqliteExchangeEngine, "sqlite on a temporary --data-dir", 0.6)
	if serr := sq.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	return []row{r}, nil
}

// benchPGExchange is the PostgreSQL row: a historyd on a fresh schema with -postgres-max-conns
// connections over the memory engine, target at least 0.3.
func benchPGExchange(ctx context.Context, b *bench, e *pgEnv) ([]row, error) {
	var r row
	err := b.withFreshServer(ctx, e, b.cfg.PostgresMaxConns, func(s *pgServer) error {
		var err error
		r, err = exchangeOverMemory(ctx, b, s.historyd, pgExchangeEngine, fmt.Sprintf("PostgreSQL %s, `--store postgres --postgres-max-conns %d` on a schema of its own (%s)",
			redactURL(e.url), b.cfg.PostgresMaxConns, e.settings), 0.3)
		return err
	})
	if err != nil {
		return nil, err
	}
	return []row{r}, nil
}
