package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// kilobyteText is the instruction of a "1 KB message": 1,000 bytes of text, the size the store's
// own benchmarks and its memory estimate use (internal/store/bench_test.go).
var kilobyteText = strings.Repeat("All work and no play makes Jack a dull boy. ", 23)[:1000]

// addRequest is AddMessage of a 1 KB instruction to branch.
func addRequest(branch string, i int) *historyv1.AddMessageRequest {
	return &historyv1.AddMessageRequest{
		BranchId: branch,
		Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
			InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: fmt.Sprint(i, " ", kilobyteText)},
		}},
	}
}

// benchAddVsHealth measures AddMessage throughput over Health/Check throughput on the same server
// at each concurrency (issue 8: "the stack's own ceiling"; target at least 0.8 at 50). Each
// AddMessage worker writes to a branch of its own (the usual case: one conversation per client),
// and the branches are deleted after each run so the store does not grow across runs. The two
// loads alternate which goes first, run after run, so a drift of the machine hits both.
func benchAddVsHealth(ctx context.Context, b *bench, h *historyd) ([]row, error) {
	var rows []row
	for _, conc := range []int{1, 50} {
		health := func(ctx context.Context, _, _ int) (int, error) {
			_, err := h.Client.Health.Check(ctx, &healthpb.HealthCheckRequest{})
			return 1, err
		}
		// Each worker sends one request, built once: the load generator shares the two cores with
		// the server, so it spends no CPU on building requests that the Check load does not spend.
		var branches []string
		var reqs []*historyv1.AddMessageRequest
		add := func(ctx context.Context, w, _ int) (int, error) {
			_, err := h.Client.History.AddMessage(ctx, reqs[w])
			return 1, err
		}
		// newBranches gives each worker a new branch and points add's requests at it.
		newBranches := func() error {
			var err error
			if branches, err = createBranches(ctx, h, conc); err != nil {
				return err
			}
			reqs = make([]*historyv1.AddMessageRequest, len(branches))
			for w, branch := range branches {
				reqs[w] = addRequest(branch, w)
			}
			return nil
		}
		measureAdd := func() (measured, error) {
			if err := newBranches(); err != nil {
				return measured{}, err
			}
			defer deleteBranches(ctx, h, branches)
			return measure(ctx, h, conc, b.cfg.Duration, add)
		}
		measureHealth := func() (measured, error) {
			return measure(ctx, h, conc, b.cfg.Duration, health)
		}
		if _, err := measureHealth(); err != nil { // warm-up: connections, goroutines, caches
			return nil, err
		}
		if _, err := measureAdd(); err != nil {
			return nil, err
		}
		var ratios, adds, checks, addCPU, checkCPU, addClient, checkClient []float64
		for run := range b.cfg.Runs {
			first, second := measureAdd, measureHealth
			if run%2 == 1 {
				first, second = measureHealth, measureAdd
			}
			x, err := first()
			if err != nil {
				return nil, err
			}
			y, err := second()
			if err != nil {
				return nil, err
			}
			a, c := x, y
			if run%2 == 1 {
				a, c = y, x
			}
			adds, checks, ratios = append(adds, a.PerSecond), append(checks, c.PerSecond), append(ratios, a.PerSecond/c.PerSecond)
			addCPU, checkCPU = append(addCPU, a.ServerCPU), append(checkCPU, c.ServerCPU)
			addClient, checkClient = append(addClient, a.ClientCPU), append(checkClient, c.ClientCPU)
			b.progress("AddMessage/Check c=%d run %d: %.0f/s over %.0f/s = %.2f (CPU a call: server %.0f µs / %.0f µs, load generator %.0f µs / %.0f µs)",
				conc, run+1, a.PerSecond, c.PerSecond, a.PerSecond/c.PerSecond, a.ServerCPU, c.ServerCPU, a.ClientCPU, c.ClientCPU)
		}
		r := row{
			Name: fmt.Sprintf("AddMessage / Health.Check throughput, concurrency %d", conc),
			Unit: "ratio",
			Runs: ratios,
			Detail: fmt.Sprintf("AddMessage %.0f/s, Check %.0f/s; CPU a call: server %.0f µs / %.0f µs, load generator %.0f µs / %.0f µs",
				summarize(adds).Median, summarize(checks).Median, summarize(addCPU).Median, summarize(checkCPU).Median,
				summarize(addClient).Median, summarize(checkClient).Median),
			Note: "1 KB instruction, a branch per worker, one connection",
		}
		if conc == 50 {
			r.Target, r.meets = atLeast(0.8)
		}
		if r.Met() == "NO" && b.cfg.Profile {
			if err := newBranches(); err != nil { // the last run's branches are deleted
				return nil, err
			}
			var err error
			r.Profile, err = b.cpuProfile(ctx, h, func(ctx context.Context) error {
				_, err := closedLoop(ctx, conc, b.profileDuration(), add)
				return err
			})
			deleteBranches(ctx, h, branches)
			if err != nil {
				return nil, err
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// createBranches creates n empty branches.
func createBranches(ctx context.Context, h *historyd, n int) ([]string, error) {
	ids := make([]string, n)
	for i := range ids {
		resp, err := h.Client.History.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
		if err != nil {
			return nil, err
		}
		ids[i] = resp.GetBranch().GetId()
	}
	return ids, nil
}

// deleteBranches deletes the branches, ignoring errors: it only keeps the store small.
func deleteBranches(ctx context.Context, h *historyd, ids []string) {
	for _, id := range ids {
		_, _ = h.Client.History.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: id})
	}
}

// measured is one closed-loop run with the CPU time per operation of both processes.
type measured struct {
	PerSecond float64 // operations (units) per second
	ServerCPU float64 // historyd's CPU time per operation, in µs
	ClientCPU float64 // the load generator's CPU time per operation, in µs
	// The PostgreSQL watch row's (scen_pg_watch.go): ms from the end of the writes until every
	// watcher had its branch's head, and the watchers' replica's CPU time a write, in µs.
	CatchUp, OtherCPU float64
	// DBCPU is the CPU time per operation of this machine's processes named postgres, in µs, for
	// the rows of a PostgreSQL-engine server (withPostgresCPU); 0 when not measured.
	DBCPU float64
	Ops   int64 // operations in the run (measure)
}

// measure runs a closed loop and reads the CPU time of the server and of the load generator around
// it.
func measure(ctx context.Context, h *historyd, conc int, d time.Duration, fn op) (measured, error) {
	s0, err := h.CPUTime()
	if err != nil {
		return measured{}, err
	}
	c0, err := cpuTimeOf(os.Getpid())
	if err != nil {
		return measured{}, err
	}
	r, err := closedLoop(ctx, conc, d, fn)
	if err != nil {
		return measured{}, err
	}
	s1, err := h.CPUTime()
	if err != nil {
		return measured{}, err
	}
	c1, err := cpuTimeOf(os.Getpid())
	if err != nil {
		return measured{}, err
	}
	n := float64(r.Ops)
	return measured{PerSecond: r.PerSecond(), ServerCPU: micros(s1-s0) / n, ClientCPU: micros(c1-c0) / n, Ops: r.Ops}, nil
}

// withPostgresCPU is load with the CPU time of this machine's PostgreSQL processes read around it
// (DBCPU): for a PostgreSQL-engine server, the part of a round's cost its own CPU does not show.
func withPostgresCPU(load func() (measured, error)) func() (measured, error) {
	return func() (measured, error) {
		p0 := postgresProcs()
		m, err := load()
		if err == nil && m.Ops > 0 {
			m.DBCPU = micros(postgresCPUSince(p0)) / float64(m.Ops)
		}
		return m, err
	}
}
