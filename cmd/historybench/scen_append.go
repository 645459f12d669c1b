package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Issue 21's rows: AppendMessages (one stream, a window of appendWindow) against unary AddMessage
// at concurrency 50 and against Redis XADD from the same Go client, on the memory engine and on
// sqlite --sync=full (against Redis with appendfsync always), and AddMessage under 100 watchers
// that ask for batched frames. `-engines append` runs these rows alone.

// appendWindow is the window of the AppendMessages rows (issue 21: "one stream and a window of 64").
const appendWindow = 64

// appendBranches is how many branches the append stream's items go to, round robin, as the unary
// load's 50 workers each write to a branch of their own.
const appendBranches = 50

// benchAppendRows runs issue 21's rows: on a memory server, AppendMessages over unary AddMessage
// and over Redis XADD (the machine's Redis, or none: the rows say skipped); on a sqlite --sync=full
// server, AppendMessages over XADD on a Redis of its own with appendfsync always; and the batched
// watch row.
func benchAppendRows(ctx context.Context, b *bench) ([]row, error) {
	h, err := startHistoryd(ctx, b.bin, b.memoryFlags()...)
	if err != nil {
		return nil, err
	}
	defer h.stop()
	var rows []row
	appends, adds := []float64{}, []float64{}
	for run := range b.cfg.Runs {
		a, err := appendRate(ctx, b, h)
		if err != nil {
			return nil, err
		}
		u, err := unaryRate(ctx, b, h)
		if err != nil {
			return nil, err
		}
		appends, adds = append(appends, a), append(adds, u)
		b.progress("append run %d (memory): AppendMessages window %d %.0f/s, AddMessage c=50 %.0f/s", run+1, appendWindow, a, u)
	}
	r := ratioRow("AppendMessages (one stream, window 64) / unary AddMessage c=50, memory", appends, adds, "AppendMessages", "AddMessage")
	r.Target, r.meets = atLeast(3)
	rows = append(rows, r)

	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379", PoolSize: 64})
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		rows = append(rows, row{Name: "AppendMessages / Redis XADD c=50, memory", Unit: "ratio", Note: "skipped: no Redis at 127.0.0.1:6379 (" + err.Error() + ")"})
	} else {
		var xadds, pipes []float64
		for run := range b.cfg.Runs {
			x, err := xaddRate(ctx, b, rdb, 50)
			if err != nil {
				return nil, err
			}
			p, err := xaddPipelineRate(ctx, b, rdb, appendWindow)
			if err != nil {
				return nil, err
			}
			xadds, pipes = append(xadds, x), append(pipes, p)
			b.progress("append run %d (redis): XADD c=50 %.0f/s, XADD pipeline of 64 %.0f/s", run+1, x, p)
		}
		r := ratioRow("AppendMessages (window 64) / Redis XADD c=50, memory", appends, xadds, "AppendMessages", "XADD")
		r.Target, r.meets = atLeast(0.5)
		rows = append(rows, r)
		rows = append(rows, ratioRow("AppendMessages (window 64) / Redis XADD pipelined 64 (reported)", appends, pipes, "AppendMessages", "XADD pipeline"))
	}
	if b.cfg.Engines == "append" { // with all, the memory engine's scenarios run it
		w, err := benchWatch(ctx, b, h)
		if err != nil {
			return nil, err
		}
		rows = append(rows, w...)
	}
	if err := h.stop(); err != nil {
		return nil, err
	}

	full, err := appendSQLiteFull(ctx, b)
	if err != nil {
		return nil, err
	}
	return append(rows, full), nil
}

// ratioRow is a ratio row of a over c, run by run, with both rates in the detail.
func ratioRow(name string, a, c []float64, aName, cName string) row {
	ratios := make([]float64, len(a))
	for i := range a {
		ratios[i] = a[i] / c[i]
	}
	return row{Name: name, Unit: "ratio", Runs: ratios,
		Detail: fmt.Sprintf("%s %.0f/s, %s %.0f/s", aName, summarize(a).Median, cName, summarize(c).Median),
		Note:   "1 KB instruction; one Go client process on the same machine"}
}

// appendRate is AppendMessages throughput: one stream (the client package's Appender, window
// appendWindow) kept full for the run's duration, items round robin over appendBranches new
// branches.
func appendRate(ctx context.Context, b *bench, h *historyd) (float64, error) {
	branches, err := createBranches(ctx, h, appendBranches)
	if err != nil {
		return 0, err
	}
	defer deleteBranches(ctx, h, branches)
	reqs := make([]*historyv1.AddMessageRequest, len(branches))
	for i, br := range branches {
		reqs[i] = addRequest(br, i)
	}
	ap := h.Client.NewAppender(ctx, client.WithAppendWindow(appendWindow))
	results := make(chan (<-chan client.AppendResult), appendWindow*2)
	var answered atomic.Int64
	done := make(chan error, 1)
	go func() { // owned here: ends when results is closed and drained
		var first error
		for ch := range results {
			if r := <-ch; r.Err != nil && first == nil {
				first = r.Err
			}
			answered.Add(1)
		}
		done <- first
	}()
	start := time.Now()
	deadline := start.Add(b.cfg.Duration)
	for i := 0; time.Now().Before(deadline); i++ {
		r := reqs[i%len(reqs)]
		r.RequestId = "" // each a new item: the Appender fills a fresh id in (on a copy)
		results <- ap.Append(ctx, r)
	}
	close(results)
	err = <-done
	elapsed := time.Since(start)
	if cerr := ap.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, err
	}
	return float64(answered.Load()) / elapsed.Seconds(), nil
}

// unaryRate is unary AddMessage throughput at concurrency 50, a branch per worker (the issue 8
// row's load).
func unaryRate(ctx context.Context, b *bench, h *historyd) (float64, error) {
	branches, err := createBranches(ctx, h, 50)
	if err != nil {
		return 0, err
	}
	defer deleteBranches(ctx, h, branches)
	reqs := make([]*historyv1.AddMessageRequest, len(branches))
	for i, br := range branches {
		reqs[i] = addRequest(br, i)
	}
	r, err := closedLoop(ctx, 50, b.cfg.Duration, func(ctx context.Context, w, _ int) (int, error) {
		_, err := h.Client.History.AddMessage(ctx, reqs[w])
		return 1, err
	})
	return r.PerSecond(), err
}

// xaddRate is Redis XADD throughput at concurrency conc, each worker to a stream of its own, the
// same 1 KB text as a field; the streams are deleted after.
func xaddRate(ctx context.Context, b *bench, rdb *redis.Client, conc int) (float64, error) {
	prefix := fmt.Sprintf("historybench:%d:%d:", os.Getpid(), time.Now().UnixNano())
	defer deleteStreams(ctx, rdb, prefix, conc)
	r, err := closedLoop(ctx, conc, b.cfg.Duration, func(ctx context.Context, w, _ int) (int, error) {
		return 1, rdb.XAdd(ctx, &redis.XAddArgs{Stream: prefix + strconv.Itoa(w), Values: []string{"instruction", kilobyteText}}).Err()
	})
	return r.PerSecond(), err
}

// xaddPipelineRate is XADD throughput from one goroutine sending pipelines of n commands.
func xaddPipelineRate(ctx context.Context, b *bench, rdb *redis.Client, n int) (float64, error) {
	prefix := fmt.Sprintf("historybench:%d:%d:", os.Getpid(), time.Now().UnixNano())
	defer deleteStreams(ctx, rdb, prefix, 1)
	r, err := closedLoop(ctx, 1, b.cfg.Duration, func(ctx context.Context, _, _ int) (int, error) {
		p := rdb.Pipeline()
		for range n {
			p.XAdd(ctx, &redis.XAddArgs{Stream: prefix + "0", Values: []string{"instruction", kilobyteText}})
		}
		_, err := p.Exec(ctx)
		return n, err
	})
	return r.PerSecond(), err
}

func deleteStreams(ctx context.Context, rdb *redis.Client, prefix string, n int) {
	for i := range n {
		rdb.Del(ctx, prefix+strconv.Itoa(i))
	}
}

// appendSQLiteFull is AppendMessages on sqlite --sync=full over XADD at concurrency 50 on a Redis
// of the bench's own with appendonly yes and appendfsync always (the machine's Redis keeps nothing
// on disk): each acknowledged write on disk, on both sides.
func appendSQLiteFull(ctx context.Context, b *bench) (row, error) {
	name := "AppendMessages (window 64), sqlite --sync=full / Redis XADD c=50, appendfsync always"
	rdb, stop, err := startDurableRedis(ctx)
	if err != nil {
		return row{Name: name, Unit: "ratio", Note: "skipped: " + err.Error()}, nil
	}
	defer stop()
	s, err := b.startSQLite(ctx, "full")
	if err != nil {
		return row{}, err
	}
	defer s.stop()
	var appends, xadds []float64
	for run := range b.cfg.Runs {
		a, err := appendRate(ctx, b, s.historyd)
		if err != nil {
			return row{}, err
		}
		x, err := xaddRate(ctx, b, rdb, 50)
		if err != nil {
			return row{}, err
		}
		appends, xadds = append(appends, a), append(xadds, x)
		b.progress("append run %d (durable): AppendMessages sqlite full %.0f/s, XADD appendfsync always %.0f/s", run+1, a, x)
	}
	r := ratioRow(name, appends, xadds, "AppendMessages", "XADD")
	r.Target, r.meets = atLeast(1.0)
	return r, nil
}

// startDurableRedis starts redis-server on a free port with the append-only file fsynced on every
// write, in a temporary directory; stop kills it and removes the directory.
func startDurableRedis(ctx context.Context) (*redis.Client, func(), error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, nil, fmt.Errorf("redis-server not found")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	port := lis.Addr().(*net.TCPAddr).Port
	lis.Close()
	dir, err := os.MkdirTemp("", "historybench-redis-")
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--save", "",
		"--appendonly", "yes", "--appendfsync", "always")
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), PoolSize: 64})
	stop := func() {
		rdb.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		os.RemoveAll(dir)
	}
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			stop()
			return nil, nil, fmt.Errorf("redis-server on port %d did not answer", port)
		}
		time.Sleep(50 * time.Millisecond) // a poll interval while the server starts, not a synchronisation
	}
	return rdb, stop, nil
}
