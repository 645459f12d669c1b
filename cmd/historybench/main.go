package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"google.golang.org/grpc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// config is the bench's configuration (flags).
type config struct {
	Historyd    string        // a built binary; empty: build ./cmd/historyd
	Go          string        // the go command, to build and to run pprof
	Out         string        // the results file
	Runs        int           // runs of each figure
	Duration    time.Duration // load per throughput run
	BigBranch   int           // messages of the large ListMessages branch
	SmallBranch int           // messages of the small one
	ListSamples int           // ListMessages requests per branch and run
	Watchers    int           // watchers of the watched branch
	Owners      int           // Exchange owners
	MemMessages int           // messages stored per memory run
	// The sqlite engine's rows (issue 14).
	PostgresURL    string // the PostgreSQL the sqlite --sync=full row compares with
	SQLiteCache    int64  // --sqlite-cache of every sqlite server, in bytes
	SQLiteReaders  int    // --sqlite-readers of every sqlite server
	SQLiteMessages int    // messages stored per sqlite footprint run
	FootprintRuns  int    // runs of the sqlite footprint rows (each stores SQLiteMessages)
	// SQLiteListSamples is ListSamples on the sqlite server, whose pages take twice as long.
	SQLiteListSamples int
	StartMessages     int // messages of the database the start time is measured on
	// The PostgreSQL engine's rows (issue 16), on -postgres-url.
	PostgresMaxConns     int      // --postgres-max-conns of the AddMessage and convoy servers
	PostgresReplicaConns int      // --postgres-max-conns of each of the two replicas of the watch rows
	ConvoyMessages       int      // messages of the convoy's branch
	Engines              string   // "all", or only the scenarios of "memory", "sqlite", "postgres", "append", "sqlite-add", "lease", "pgexchange" or "sqlite-exchange"
	Profile              bool     // profile the server when a target is missed
	ServerFlags          []string // extra flags of the memory engine's servers (the bench's own budgets)
}

// quick is the configuration of -quick: every scenario, tiny, for the smoke test.
func (c *config) quick() {
	c.Runs, c.Duration = 1, 150*time.Millisecond
	c.BigBranch, c.SmallBranch, c.ListSamples = 2_000, 200, 50
	c.Watchers, c.Owners, c.MemMessages = 5, 5, 2_000
	c.SQLiteMessages, c.StartMessages, c.SQLiteListSamples = 2_000, 2_000, 50
	// The smoke test shares the PostgreSQL with every other package's tests: small pools (the
	// brief: 2-4 connections a test store).
	c.ConvoyMessages, c.PostgresMaxConns, c.PostgresReplicaConns = 2_000, 4, 2
}

// bench is one run of the tool.
type bench struct {
	cfg      config
	bin      string
	log      io.Writer
	profiles int // profiles taken so far, to name their files
}

// progress writes a line of progress to the log.
func (b *bench) progress(format string, args ...any) {
	fmt.Fprintf(b.log, "historybench: "+format+"\n", args...)
}

// machine describes where and when the figures were taken.
type machine struct {
	Date, CPU, OS, Version, GoVersion string
	Cores, GOMAXPROCS                 int
	Elapsed                           time.Duration
	// LoadStart and LoadEnd are the 1-minute load averages when the bench started and ended: a
	// load well above the core count means other work shared the machine.
	LoadStart, LoadEnd string
}

// loadAverage is the 1-minute load average of /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "unknown"
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg := config{}
	fs := flag.NewFlagSet("historybench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&cfg.Historyd, "historyd", "", "historyd binary to measure (default: build ./cmd/historyd into a temporary directory)")
	fs.StringVar(&cfg.Go, "go", "go", "the go command, to build historyd and to read profiles")
	fs.StringVar(&cfg.Out, "out", "bench/results.md", "results file (Markdown); its directory receives the profiles of missed targets")
	fs.IntVar(&cfg.Runs, "runs", 5, "runs of each figure: the table shows their median, minimum and maximum")
	fs.DurationVar(&cfg.Duration, "duration", 2*time.Second, "load per throughput run")
	fs.IntVar(&cfg.BigBranch, "big-branch", 100_000, "messages of the large ListMessages branch")
	fs.IntVar(&cfg.SmallBranch, "small-branch", 1_000, "messages of the small ListMessages branch")
	fs.IntVar(&cfg.ListSamples, "list-samples", 1_000, "ListMessages requests per branch and run")
	fs.IntVar(&cfg.Watchers, "watchers", 100, "watchers of the watched branch")
	fs.IntVar(&cfg.Owners, "owners", 100, "Exchange owners")
	fs.IntVar(&cfg.MemMessages, "mem-messages", 50_000, "1 KB messages stored per memory run")
	fs.StringVar(&cfg.PostgresURL, "postgres-url", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable",
		"PostgreSQL the sqlite --sync=full row compares with (a schema of its own is created and dropped); unreachable: the row says skipped")
	fs.Int64Var(&cfg.SQLiteCache, "sqlite-cache", 32<<20, "--sqlite-cache of the sqlite servers, in bytes (historyd's default: 32 MiB)")
	fs.IntVar(&cfg.SQLiteReaders, "sqlite-readers", 4, "--sqlite-readers of the sqlite servers (historyd's default: 4)")
	fs.IntVar(&cfg.SQLiteMessages, "sqlite-messages", 200_000, "1 KB messages stored per sqlite footprint run (resident memory growth, disk bytes)")
	fs.IntVar(&cfg.SQLiteListSamples, "sqlite-list-samples", 500, "ListMessages requests per branch and run on the sqlite server (its pages take about twice as long)")
	fs.IntVar(&cfg.FootprintRuns, "footprint-runs", 1, "runs of the sqlite footprint rows: each writes -sqlite-messages through a fresh server, about a minute at 200k on 2 cores")
	fs.IntVar(&cfg.StartMessages, "start-messages", 1_000_000, "messages of the sqlite database the start time is measured on")
	fs.IntVar(&cfg.PostgresMaxConns, "postgres-max-conns", engineConcurrency,
		"--postgres-max-conns of the PostgreSQL engine's AddMessage and convoy servers, and the pool of the INSERT they are compared with (one connection per worker: the pool is not the limit)")
	fs.IntVar(&cfg.PostgresReplicaConns, "postgres-replica-conns", 25,
		"--postgres-max-conns of each of the two replicas of the PostgreSQL watch rows (both connected at once: 50 of the server's connections)")
	fs.IntVar(&cfg.ConvoyMessages, "convoy-messages", 100_000, "messages of the branch the PostgreSQL convoy row appends to")
	fs.StringVar(&cfg.Engines, "engines", "all", "the scenarios to run: all, memory (issue 8's, on the memory engine), sqlite (issue 14's; the sqlite-versus-memory row still starts a memory server), postgres (issue 16's, on -postgres-url), append (issue 21's rows alone: AppendMessages against AddMessage and Redis, batched watch frames), sqlite-add (issue 14's two AddMessage rows alone: sqlite normal over memory, sqlite full over a PostgreSQL INSERT), lease (issue 18's rows alone: Lease+Ack against Send+PopMessage on each engine), pgexchange (issue 17's PostgreSQL Exchange Send+Collect row alone) or sqlite-exchange (issue 17's sqlite Exchange row alone: Send+Collect on sqlite --sync=normal over the memory engine)")
	fs.BoolVar(&cfg.Profile, "profile", true, "when a target is missed, profile the server during a further run and add the top entries to the results")
	quick := fs.Bool("quick", false, "every scenario with tiny sizes and one short run (a smoke test, not figures)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *quick {
		cfg.quick()
	}
	if !slices.Contains(engineChoices, cfg.Engines) {
		fmt.Fprintf(stderr, "historybench: -engines: want %s or %s\n", strings.Join(engineChoices[:len(engineChoices)-1], ", "), engineChoices[len(engineChoices)-1])
		return 2
	}
	if cfg.Runs < 1 || cfg.Duration <= 0 || cfg.SmallBranch < listPage || cfg.BigBranch < cfg.SmallBranch || cfg.Owners < 2 ||
		cfg.SQLiteCache < 1<<20 || cfg.SQLiteReaders < 1 || cfg.SQLiteMessages < 1 || cfg.StartMessages < 1 || cfg.FootprintRuns < 1 || cfg.SQLiteListSamples < 1 ||
		cfg.PostgresMaxConns < 1 || cfg.PostgresReplicaConns < 1 || cfg.ConvoyMessages < 1 || cfg.Watchers < 1 {
		fmt.Fprintln(stderr, "historybench: need runs >= 1, duration > 0, small-branch >= 100, big-branch >= small-branch, owners >= 2, sqlite-cache >= 1 MiB, sqlite-readers, sqlite-messages, footprint-runs, start-messages, watchers, postgres-max-conns, postgres-replica-conns and convoy-messages >= 1")
		return 2
	}
	// The store's budget is lifted so that the 100k-message branch and the throughput runs never
	// meet it. So is the Exchange's byte budget (issue 11, 256 MiB by default): the broadcast rows
	// queue each message in 99 inboxes that nobody drains, about 719 bytes a copy by the
	// Exchange's estimate, which passes 256 MiB within the first second of a broadcast run on 2
	// cores (RESOURCE_EXHAUSTED, and make bench stopped there). The per-sender inbox bound
	// (10,000 messages) stands: the broadcast load stays far below it.
	cfg.ServerFlags = []string{"--memory-budget", "0", "--exchange-max-bytes", "0"}
	if err := benchAll(ctx, cfg, stdout, stderr); err != nil {
		fmt.Fprintln(stderr, "historybench:", err)
		return 1
	}
	return 0
}

// benchAll builds or finds historyd, runs every scenario and writes the results.
func benchAll(ctx context.Context, cfg config, stdout, stderr io.Writer) error {
	start, load := time.Now(), loadAverage()
	b := &bench{cfg: cfg, log: stderr}
	if err := os.MkdirAll(filepath.Dir(cfg.Out), 0o755); err != nil {
		return err
	}
	b.bin = cfg.Historyd
	if b.bin == "" {
		dir, err := os.MkdirTemp("", "historybench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		b.progress("building historyd")
		if b.bin, err = buildHistoryd(ctx, cfg.Go, dir); err != nil {
			return err
		}
	}

	var rows []row
	memKB := 0.0 // the memory engine's resident KB per message, unknown with -engines sqlite
	if cfg.Engines == "all" || cfg.Engines == "append" {
		rs, err := benchAppendRows(ctx, b)
		if err != nil {
			return err
		}
		rows = append(rows, rs...)
	}
	if cfg.Engines == "all" || cfg.Engines == "memory" {
		mem, err := benchMemoryEngine(ctx, b)
		if err != nil {
			return err
		}
		rows = append(rows, mem...)
		memKB = summarize(mem[len(mem)-1].Runs).Median
	}
	if cfg.Engines == "all" || cfg.Engines == "sqlite" {
		sqliteRows, err := benchSQLite(ctx, b, memKB)
		if err != nil {
			return err
		}
		rows = append(rows, sqliteRows...)
	}
	if cfg.Engines == "sqlite-add" {
		sqliteRows, err := benchSQLiteAdd(ctx, b)
		if err != nil {
			return err
		}
		rows = append(rows, sqliteRows...)
	}
	if cfg.Engines == "all" || cfg.Engines == "postgres" || cfg.Engines == "pgexchange" {
		pgRows, err := benchPostgresEngine(ctx, b)
		if err != nil {
			return err
		}
		rows = append(rows, pgRows...)
	}
	if cfg.Engines == "sqlite-exchange" {
		rs, err := benchSQLiteExchange(ctx, b)
		if err != nil {
			return err
		}
		rows = append(rows, rs...)
	}
	if cfg.Engines == "all" || cfg.Engines == "lease" {
		leaseRows, err := benchLeases(ctx, b)
		if err != nil {
			return err
		}
		rows = append(rows, leaseRows...)
	}

	m := describeMachine(ctx, cfg.Go, b.bin)
	m.Elapsed = time.Since(start).Round(time.Second)
	m.LoadStart, m.LoadEnd = load, loadAverage()
	printTable(stdout, rows)
	var md bytes.Buffer
	markdown(&md, m, cfg, rows)
	if err := os.WriteFile(cfg.Out, md.Bytes(), 0o644); err != nil {
		return err
	}
	b.progress("results written to %s in %v", cfg.Out, m.Elapsed)
	for _, r := range rows {
		if r.Met() == "NO" {
			b.progress("target missed: %s (median %s, target %s)", r.Name, format(r.Summary().Median, r.Unit), r.Target)
		}
	}
	return nil
}

// benchMemoryEngine runs the scenarios of issue 8 on the memory engine; the last row is the
// resident memory per message.
func benchMemoryEngine(ctx context.Context, b *bench) ([]row, error) {
	h, err := startHistoryd(ctx, b.bin, b.memoryFlags()...)
	if err != nil {
		return nil, err
	}
	var rows []row
	for _, scenario := range []func(context.Context, *bench, *historyd) ([]row, error){
		benchAddVsHealth, benchList, benchWatch, benchExchange,
	} {
		rs, err := scenario(ctx, b, h)
		if err != nil {
			_ = h.stop()
			return nil, err
		}
		rows = append(rows, rs...)
	}
	if err := h.stop(); err != nil {
		return nil, err
	}
	mem, err := benchMemory(ctx, b)
	if err != nil {
		return nil, err
	}
	return append(rows, mem...), nil
}

// benchSQLite runs the sqlite engine's scenarios (issue 14); memKB is the memory engine's resident
// KB per message, which the footprint row compares with.
func benchSQLite(ctx context.Context, b *bench, memKB float64) ([]row, error) {
	rows, sq, err := benchSQLiteVsMemory(ctx, b)
	if err != nil {
		return nil, err
	}
	list, err := listRatio(ctx, b, sq.historyd, ", sqlite engine", b.cfg.SQLiteListSamples)
	if serr := sq.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	rows = append(rows, list...)
	for _, scenario := range []func(context.Context, *bench) ([]row, error){
		benchSQLiteVsPostgres,
		benchSQLiteExchange,
		func(ctx context.Context, b *bench) ([]row, error) { return benchFootprint(ctx, b, memKB) },
		benchStart,
	} {
		rs, err := scenario(ctx, b)
		if err != nil {
			return nil, err
		}
		rows = append(rows, rs...)
	}
	return rows, nil
}

// benchSQLiteAdd runs issue 14's two AddMessage rows alone (-engines sqlite-add): a few minutes
// less than every sqlite row, for work on the engine's write path.
func benchSQLiteAdd(ctx context.Context, b *bench) ([]row, error) {
	rows, sq, err := benchSQLiteVsMemory(ctx, b)
	if err != nil {
		return nil, err
	}
	if err := sq.stop(); err != nil {
		return nil, err
	}
	pg, err := benchSQLiteVsPostgres(ctx, b)
	if err != nil {
		return nil, err
	}
	return append(rows, pg...), nil
}

// engineChoices are the values of -engines, in the order its usage names them.
var engineChoices = []string{"all", "memory", "sqlite", "postgres", "append", "sqlite-add", "lease", "pgexchange", "sqlite-exchange"}

// describeMachine collects the date, the cores, the CPU model and the versions.
func describeMachine(ctx context.Context, gocmd, bin string) machine {
	m := machine{
		Date:       time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Cores:      runtime.NumCPU(),
		GOMAXPROCS: runtime.GOMAXPROCS(0),
		OS:         runtime.GOOS + "/" + runtime.GOARCH,
		CPU:        "unknown CPU",
		Version:    "unknown version",
		GoVersion:  runtime.Version(),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				m.CPU = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	if out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output(); err == nil {
		m.Version = strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, gocmd, "version", bin).Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) >= 2 {
			m.GoVersion = f[len(f)-1]
		}
	}
	return m
}

// waitForReady makes a call wait for the connection instead of failing while it is being made.
func waitForReady() grpc.CallOption { return grpc.WaitForReady(true) }
