package store_test

import (
	"context"
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

// BenchmarkHeapPerMessage reports the heap bytes one stored 1 KB message costs (issue 4 figures),
// next to the memory budget's estimate of it.
func BenchmarkHeapPerMessage(b *testing.B) {
	const n = 20_000
	for b.Loop() {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		st := store.NewMemory(store.WithMemoryBudget(0))
		fill(b, st, n)
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "heap-B/msg")
		b.ReportMetric(float64(st.MemoryUsed())/n, "budget-B/msg")
		runtime.KeepAlive(st)
	}
}
