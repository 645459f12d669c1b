package sqlite

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/cputime"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// kilobyteText is an instruction of about 1 KB, the message size of the
// issue's figures (internal/store/bench_test.go has the memory engine's).
var kilobyteText = strings.Repeat("All work and no play makes Jack a dull boy. ", 23)[:1000]

// benchAdd runs add_message(instruction=<1 KB>) from 50 goroutines, each
// on a branch of its own, on a store with the given sync mode: the
// in-process cost of a durable write with group commit (issue 14;
// `make bench` measures it over gRPC against the memory engine).
func benchAdd(b *testing.B, sync Sync, requestIDs bool) {
	s, err := OpenStore(context.Background(), StoreConfig{Config: Config{Dir: b.TempDir(), Sync: sync}})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	in := store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(kilobyteText)}}
	b.SetParallelism(25) // x GOMAXPROCS (2 here): 50 writers
	b.ReportAllocs()
	c0, w0 := s.Writes()
	f0 := s.w.storage.walFrames.Load()
	k0, r0 := checkpointSeconds(s)
	cpu0 := cputime.Process()
	var failed atomic.Bool
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		res, err := s.CreateBranch(ctx, store.CreateBranchInput{})
		if err != nil {
			failed.Store(true)
			return
		}
		branch := res.Branch.ID
		for pb.Next() {
			var opts store.WriteOptions
			if requestIDs {
				opts.RequestID = uuid.NewString()
			}
			if _, err := s.AddMessage(ctx, branch, in, opts); err != nil {
				failed.Store(true)
				return
			}
		}
	})
	if failed.Load() {
		b.Fatal("a write failed")
	}
	cpu := cputime.Process() - cpu0
	c1, w1 := s.Writes()
	if c1 > c0 {
		b.ReportMetric(float64(w1-w0)/float64(c1-c0), "writes/commit")
	}
	if w1 > w0 {
		// Every page a commit dirties is a WAL frame: a header and the
		// page, each a write(2) of SQLite's.
		b.ReportMetric(float64(s.w.storage.walFrames.Load()-f0)/float64(w1-w0), "walframes/write")
		// The wall time the checkpoints took (their fsyncs included), and
		// of it the restarting and truncating ones, which run on the
		// writer: every queued write waits for them.
		k1, r1 := checkpointSeconds(s)
		b.ReportMetric((k1-k0)*1e6/float64(w1-w0), "ckpt-µs/write")
		b.ReportMetric((r1-r0)*1e6/float64(w1-w0), "restart-µs/write")
	}
	// The machine's cores are shared: the CPU a write costs (user and
	// system, every goroutine of the process, the writer's included) is
	// the figure to compare, not the wall-clock ns/op.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
}

// checkpointSeconds is the time every checkpoint of s took so far, and
// the restarting and truncating ones.
func checkpointSeconds(s *Store) (all, waiting float64) {
	for mode, c := range s.StorageStats().Checkpoints {
		all += c.Seconds.Sum
		if store.CheckpointMode(mode) != store.CheckpointPassive {
			waiting += c.Seconds.Sum
		}
	}
	return all, waiting
}

func BenchmarkAddMessageSyncNormal(b *testing.B) { benchAdd(b, SyncNormal, false) }
func BenchmarkAddMessageSyncFull(b *testing.B)   { benchAdd(b, SyncFull, false) }

// BenchmarkAddMessageRequestIDs is BenchmarkAddMessageSyncNormal with a new request id on every
// write, as the client package's Appender sends them (issue 21's AppendMessages row): each write
// also keeps its idempotency record (requests.go).
func BenchmarkAddMessageRequestIDs(b *testing.B) { benchAdd(b, SyncNormal, true) }

// BenchmarkListMessagesPage: a page of 100 from the middle of a branch of
// n messages; the page costs the same whatever n (O(page)).
func BenchmarkListMessagesPage(b *testing.B) {
	for _, n := range []int{1_000, 20_000} {
		b.Run(map[int]string{1_000: "1k", 20_000: "20k"}[n], func(b *testing.B) {
			s, err := OpenStore(context.Background(), StoreConfig{Config: Config{Dir: b.TempDir()}})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			res, err := s.CreateBranch(ctx, store.CreateBranchInput{})
			if err != nil {
				b.Fatal(err)
			}
			id := res.Branch.ID
			fillBranch(b, s, id, n)
			page, err := s.ListMessages(ctx, id, store.ListInput{PageSize: n / 2})
			if err != nil {
				b.Fatal(err)
			}
			token := page.NextPageToken
			b.ResetTimer()
			for b.Loop() {
				if _, err := s.ListMessages(ctx, id, store.ListInput{PageSize: 100, PageToken: token}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fillBranch adds n 1 KB instructions from 16 goroutines.
func fillBranch(tb testing.TB, s *Store, id uuid.UUID, n int) {
	tb.Helper()
	in := store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(kilobyteText)}}
	var next atomic.Int64
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for next.Add(1) <= int64(n) {
				if _, err := s.AddMessage(context.Background(), id, in, store.WriteOptions{}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			tb.Fatal(err)
		}
	}
}
