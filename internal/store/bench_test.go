package store_test

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// kilobyteText is an instruction of about 1 KB, the message size the figures use.
var kilobyteText = strings.Repeat("All work and no play makes Jack a dull boy. ", 23)[:1000]

func fill(tb testing.TB, st *store.Memory, n int) uuid.UUID {
	tb.Helper()
	ctx := context.Background()
	res, err := st.CreateBranch(ctx, store.CreateBranchInput{System: jsonv.StringValue("S")})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		if _, err := st.AddMessage(ctx, res.Branch.ID, store.AddInput{Factory: store.Factory{
			Instruction: jsonv.StringValue(strconv.Itoa(i) + " " + kilobyteText),
		}}, store.WriteOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	return res.Branch.ID
}

// rotateEvery bounds a benchmark branch, so that a long run does not hold gigabytes.
const rotateEvery = 50_000

// BenchmarkAddMessage: add_message(instruction=<1 KB>) on one branch (issue 4 figures); the branch
// is replaced, untimed, every rotateEvery adds.
func BenchmarkAddMessage(b *testing.B) {
	st := store.NewMemory(store.WithMemoryBudget(0))
	ctx := context.Background()
	in := store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(kilobyteText)}}
	var branch uuid.UUID
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if i%rotateEvery == 0 {
			b.StopTimer()
			if i > 0 {
				if _, err := st.DeleteBranch(ctx, branch, store.WriteOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			branch = fill(b, st, 0)
			b.StartTimer()
		}
		if _, err := st.AddMessage(ctx, branch, in, store.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddMessageParallel: the same on one branch per goroutine (branches do not share locks).
func BenchmarkAddMessageParallel(b *testing.B) {
	st := store.NewMemory(store.WithMemoryBudget(0))
	ctx := context.Background()
	in := store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(kilobyteText)}}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		branch := fill(b, st, 0)
		for i := 1; pb.Next(); i++ {
			if _, err := st.AddMessage(ctx, branch, in, store.WriteOptions{}); err != nil {
				b.Error(err)
				return
			}
			if i%rotateEvery == 0 { // bounded memory; the swap is timed but rare
				if _, err := st.DeleteBranch(ctx, branch, store.WriteOptions{}); err != nil {
					b.Error(err)
					return
				}
				branch = fill(b, st, 0)
			}
		}
	})
}

// BenchmarkListMessagesPage100 reads a page of 100 from the middle of branches of 1k and 100k
// messages (issue 4: the 100k page must cost at most 1.5x the 1k page).
func BenchmarkListMessagesPage100(b *testing.B) {
	for _, n := range []int{1_000, 100_000} {
		b.Run(strconv.Itoa(n/1000)+"k", func(b *testing.B) {
			st := store.NewMemory(store.WithMemoryBudget(0))
			branch := fill(b, st, n)
			token := middleToken(b, st, branch, n)
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				page, err := st.ListMessages(ctx, branch, store.ListInput{PageSize: 100, PageToken: token})
				if err != nil || len(page.Messages) != 100 {
					b.Fatalf("%d messages, %v", len(page.Messages), err)
				}
			}
		})
	}
}

// middleToken returns a page token that starts in the middle of the branch.
func middleToken(tb testing.TB, st *store.Memory, branch uuid.UUID, n int) string {
	tb.Helper()
	in := store.ListInput{PageSize: min(store.MaxPageSize, n/2)}
	for read := 0; read < n/2; read += in.PageSize {
		page, err := st.ListMessages(context.Background(), branch, in)
		if err != nil {
			tb.Fatal(err)
		}
		in.PageToken = page.NextPageToken
	}
	return in.PageToken
}

// BenchmarkHeapPerMessage reports the heap bytes one stored 1 KB message costs, next to the
// memory budget's estimate of it: 20,000 messages on one branch (issue 4 figures), and 50,000 on
// 10 branches, the layout of historybench's row "resident memory per stored 1 KB message" (issue
// 8: "at most 2.5 KB"), whose heap share this isolates from the server's.
func BenchmarkHeapPerMessage(b *testing.B) {
	for _, c := range []struct{ branches, perBranch int }{{1, 20_000}, {10, 5_000}} {
		b.Run(strconv.Itoa(c.branches)+"x"+strconv.Itoa(c.perBranch), func(b *testing.B) {
			n := float64(c.branches * c.perBranch)
			for b.Loop() {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				st := store.NewMemory(store.WithMemoryBudget(0))
				for range c.branches {
					fill(b, st, c.perBranch)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/msg")
				b.ReportMetric(float64(st.MemoryUsed())/n, "budget-B/msg")
				runtime.KeepAlive(st)
			}
		})
	}
}

// deepBranch is a branch whose log holds store.DefaultEventRetention events (1 KB instructions):
// a full log, the case a reconnecting client with an old cursor replays.
func deepBranch(b *testing.B, st *store.Memory) uuid.UUID {
	b.Helper()
	return fill(b, st, store.DefaultEventRetention)
}

// BenchmarkSubscribeDeepCursor is Subscribe with a cursor at the start of a full log (after=1, so
// 9,999 retained events to replay) and Close, reading nothing: what a client reconnecting in a loop
// costs the store. docs/design.md#sequences: "The writer never waits for a
// watcher"; Subscribe registers and copies no backlog, so B/op does not grow with the log.
func BenchmarkSubscribeDeepCursor(b *testing.B) {
	st := store.NewMemory(store.WithMemoryBudget(0))
	branch := deepBranch(b, st)
	ctx := context.Background()
	after := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		s, err := st.Subscribe(ctx, branch, store.SubscribeInput{After: &after})
		if err != nil {
			b.Fatal(err)
		}
		s.Close()
	}
}

// BenchmarkSubscribeReplay is Subscribe after=1 on a full log and reading the whole replay with
// Next, to the head: the cost of catching up, per subscription.
func BenchmarkSubscribeReplay(b *testing.B) {
	st := store.NewMemory(store.WithMemoryBudget(0))
	branch := deepBranch(b, st)
	ctx := context.Background()
	info, err := st.GetBranch(ctx, branch)
	if err != nil {
		b.Fatal(err)
	}
	after := uint64(1)
	b.ReportAllocs()
	for b.Loop() {
		s, err := st.Subscribe(ctx, branch, store.SubscribeInput{After: &after})
		if err != nil {
			b.Fatal(err)
		}
		for s.Last() < info.HeadSequence {
			if _, err := s.Next(ctx); err != nil {
				b.Fatal(err)
			}
		}
		s.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(info.HeadSequence-after), "ns/event")
}

// BenchmarkSubscribeLoopWriter is AddMessage on a branch with a full log while another goroutine
// subscribes to it with a deep cursor (after=1) and closes, in a loop: a client reconnecting with
// an old cursor. docs/design.md#sequences: "The writer never waits for a watcher", so ns/op stays near
// BenchmarkAddMessage's; subscribes/op is how many reconnects the loop made per write.
func BenchmarkSubscribeLoopWriter(b *testing.B) {
	st := store.NewMemory(store.WithMemoryBudget(0))
	branch := deepBranch(b, st)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var subscribes int
	go func() { // owned by this benchmark: cancel and <-done
		defer close(done)
		after := uint64(1)
		for ctx.Err() == nil {
			s, err := st.Subscribe(ctx, branch, store.SubscribeInput{After: &after})
			var se *store.SequenceError
			if errors.As(err, &se) && errors.Is(err, store.ErrHistoryCompacted) {
				after = se.Oldest - 1 // the writer moved the log on: still a full log behind
				continue
			}
			if err != nil {
				b.Error(err)
				return
			}
			s.Close()
			subscribes++
		}
	}()
	in := store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(kilobyteText)}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := st.AddMessage(context.Background(), branch, in, store.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	cancel()
	<-done
	b.ReportMetric(float64(subscribes)/float64(b.N), "subscribes/op")
}

// BenchmarkHeapPerRequest reports the heap bytes one remembered request id costs (ADR-0010: "keep
// what a repeat needs, no more"), next to its budget charge: the same DefaultRequestMax
// AddMessage calls (1 KB instructions, ids of 8 bytes) on one branch with and without request
// ids; the difference is the records.
func BenchmarkHeapPerRequest(b *testing.B) {
	const n = store.DefaultRequestMax
	ctx := context.Background()
	run := func(withIDs bool) (heap, budget int64) {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		st := store.NewMemory(store.WithMemoryBudget(0))
		res, err := st.CreateBranch(ctx, store.CreateBranchInput{})
		if err != nil {
			b.Fatal(err)
		}
		for i := range n {
			var opts store.WriteOptions
			if withIDs {
				opts.RequestID = "req-" + strconv.FormatInt(int64(10_000_000+i), 36)
			}
			if _, err := st.AddMessage(ctx, res.Branch.ID, store.AddInput{Factory: store.Factory{
				Instruction: jsonv.StringValue(kilobyteText),
			}}, opts); err != nil {
				b.Fatal(err)
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(st)
		return int64(after.HeapAlloc) - int64(before.HeapAlloc), st.MemoryUsed()
	}
	for b.Loop() {
		heapWith, budgetWith := run(true)
		heapWithout, budgetWithout := run(false)
		b.ReportMetric(float64(heapWith-heapWithout)/n, "heap-B/request")
		b.ReportMetric(float64(budgetWith-budgetWithout)/n, "budget-B/request")
	}
}
