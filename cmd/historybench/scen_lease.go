package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Acknowledged delivery's cost (issue 18, "Benchmarks (make bench, ratios in one run)": "Lease+Ack
// round trips per second at concurrency 50 >= 0.5x Send+PopMessage on the same engine, for each
// engine"). A PopMessage takes only what a Collect put in an inbox, so both loads move a message
// through the whole Exchange each round, LionAGI's way and the acknowledged way, and differ only
// in how the receiver takes it:
//
//   - Send+PopMessage: Send a direct message, Collect the sender's outbox, PopMessage it;
//   - Lease+Ack: Send a direct message, Collect the sender's outbox, Lease it, Ack its receipt.
//
// Each worker has a sender and a receiver of its own, so every round finds exactly its message
// (a round that does not is an error, not a slow round) and no inbox grows. The two loads run on
// the same historyd, alternating which goes first (alternate), for the memory engine, sqlite
// --sync=normal and PostgreSQL (skipped, saying why, without one). -engines lease runs these rows
// alone.

// leaseTarget is issue 18's target for each engine's ratio.
const leaseTarget = 0.5

// leaseRowName names the row of the engine named engine.
func leaseRowName(engine string, conc int) string {
	return fmt.Sprintf("Exchange Lease+Ack / Send+PopMessage, rounds of Send, Collect and the take, concurrency %d, %s", conc, engine)
}

// leaseEngines are the rows' engines, in the order they run.
const (
	leaseMemoryEngine = "memory engine"
	leaseSQLiteEngine = "sqlite --sync=normal"
	leasePGEngine     = "PostgreSQL engine"
)

// leaseConcurrency is the rows' workers: 50, each with two owners of its own (100 owners, as
// the other Exchange rows), fewer when -owners is smaller.
func (c config) leaseConcurrency() int { return max(1, min(exchangeConcurrency, c.Owners/2)) }

// leaseLoad registers a sender and a receiver per worker on h and returns the load of one run: a
// round sends a direct message from the worker's sender to its receiver, collects it, and takes it
// with PopMessage (lease false) or with Lease and Ack (lease true). A unit is one round.
func leaseLoad(ctx context.Context, h *historyd, conc int, lease bool, d time.Duration) (func() (measured, error), error) {
	senders, receivers := make([]string, conc), make([]string, conc)
	for w := range conc {
		senders[w], receivers[w] = uuid.NewString(), uuid.NewString()
		for _, o := range []string{senders[w], receivers[w]} {
			if _, err := h.Client.Exchange.Register(ctx, &historyv1.RegisterRequest{OwnerId: o}); err != nil {
				return nil, fmt.Errorf("registering an owner: %w", err)
			}
		}
	}
	content := `{"text": "hello", "n": 1}`
	round := func(ctx context.Context, w, _ int) (int, error) {
		from, to := senders[w], receivers[w]
		sent, err := h.Client.Exchange.Send(ctx, &historyv1.SendRequest{Sender: from, Recipient: client.Participant(to), ContentJson: &content})
		if err != nil {
			return 0, fmt.Errorf("sending: %w", err)
		}
		id := sent.GetMessage().GetId()
		if resp, err := h.Client.Exchange.Collect(ctx, &historyv1.CollectRequest{OwnerId: from}); err != nil {
			return 0, fmt.Errorf("collecting: %w", err)
		} else if resp.GetDeliveredCount() != 1 {
			return 0, fmt.Errorf("the collect of %s after one Send delivered %d, want 1", from, resp.GetDeliveredCount())
		}
		if !lease {
			resp, err := h.Client.Exchange.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: to, Sender: from})
			if err != nil {
				return 0, fmt.Errorf("popping: %w", err)
			}
			if got := resp.GetMessage().GetId(); got != id {
				return 0, fmt.Errorf("PopMessage of %s's only message %s returned %q", to, id, got)
			}
			return 1, nil
		}
		resp, err := h.Client.Exchange.Lease(ctx, &historyv1.LeaseRequest{OwnerId: to, Sender: &from, MaxMessages: 1})
		if err != nil {
			return 0, fmt.Errorf("leasing: %w", err)
		}
		if ls := resp.GetLeased(); len(ls) != 1 || ls[0].GetMessage().GetId() != id || ls[0].GetAttempt() != 1 {
			return 0, fmt.Errorf("the Lease of %s's only message %s returned %v", to, id, ls)
		}
		if _, err := h.Client.Exchange.Ack(ctx, &historyv1.AckRequest{OwnerId: to, Receipt: resp.GetLeased()[0].GetReceipt()}); err != nil {
			return 0, fmt.Errorf("acknowledging: %w", err)
		}
		return 1, nil
	}
	return func() (measured, error) { return measure(ctx, h, conc, d, round) }, nil
}

// leaseRow measures Lease+Ack over Send+PopMessage rounds on h, whose engine is engine.
func leaseRow(ctx context.Context, b *bench, h *historyd, engine, note string) (row, error) {
	conc := b.cfg.leaseConcurrency()
	x, err := leaseLoad(ctx, h, conc, true, b.cfg.Duration)
	if err != nil {
		return row{}, fmt.Errorf("%s: %w", engine, err)
	}
	y, err := leaseLoad(ctx, h, conc, false, b.cfg.Duration)
	if err != nil {
		return row{}, fmt.Errorf("%s: %w", engine, err)
	}
	xs, ys, err := alternate(b, "Exchange Lease+Ack over Send+PopMessage rounds/s, "+engine+", c=50,", x, y)
	if err != nil {
		return row{}, fmt.Errorf("%s: %w", engine, err)
	}
	rs, xr, yr, xc, yc := ratios(xs, ys)
	r := row{
		Name: leaseRowName(engine, conc),
		Unit: "ratio",
		Runs: rs,
		Detail: fmt.Sprintf("Lease+Ack %.0f rounds/s, PopMessage %.0f rounds/s; server CPU a round %.0f µs / %.0f µs",
			xr, yr, xc, yc),
		Note: fmt.Sprintf("one historyd; %d workers, each with a sender and a receiver of its own: a round sends a direct message, "+
			"collects it, and takes it with Lease (max 1, the sender's inbox) and Ack, or with PopMessage (4 calls against 3); %s", conc, note),
	}
	r.Target, r.meets = atLeast(leaseTarget)
	if r.Met() == "NO" && b.cfg.Profile {
		load, err := leaseLoad(ctx, h, conc, true, b.profileDuration())
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

// benchLeases runs the lease rows on each engine: memory, sqlite, and PostgreSQL when there is
// one and historyd serves it (else that row says skipped, and why).
func benchLeases(ctx context.Context, b *bench) ([]row, error) {
	var rows []row
	mem, err := startHistoryd(ctx, b.bin, b.memoryFlags()...)
	if err != nil {
		return nil, err
	}
	r, err := leaseRow(ctx, b, mem, leaseMemoryEngine, "--store memory")
	if serr := mem.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	rows = append(rows, r)

	sq, err := b.startSQLite(ctx, "normal")
	if err != nil {
		return nil, err
	}
	r, err = leaseRow(ctx, b, sq.historyd, leaseSQLiteEngine, "sqlite on a temporary --data-dir")
	if serr := sq.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	rows = append(rows, r)

	pg, err := benchPGLease(ctx, b)
	if err != nil {
		return nil, err
	}
	return append(rows, pg), nil
}

// benchPGLease is the PostgreSQL row, on a historyd on a fresh schema with -postgres-max-conns
// connections, or the row skipped.
func benchPGLease(ctx context.Context, b *bench) (row, error) {
	skip := func(reason string, err error) row {
		b.progress("PostgreSQL lease row skipped: %s: %v", reason, err)
		target, meets := atLeast(leaseTarget)
		return row{Name: leaseRowName(leasePGEngine, b.cfg.leaseConcurrency()), Unit: "ratio", Target: target, meets: meets,
			Skipped: "skipped: " + reason, Detail: err.Error()}
	}
	e, reason, err := b.openPGEngine(ctx)
	if err != nil {
		return skip(reason, err), nil
	}
	defer e.close()
	var r row
	err = b.withFreshServer(ctx, e, b.cfg.PostgresMaxConns, func(s *pgServer) error {
		var err error
		r, err = leaseRow(ctx, b, s.historyd, leasePGEngine, fmt.Sprintf("PostgreSQL %s, `--store postgres --postgres-max-conns %d` on a schema of its own (%s)",
			redactURL(e.url), b.cfg.PostgresMaxConns, e.settings))
		return err
	})
	return r, err
}
