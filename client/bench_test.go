//go:build unix

package client_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/cputime"
	"github.com/historyd/historyd/internal/store"
)

// The benchmarks of issue 21's rows in one process: the client package and a server wired as
// historyd's over loopback TCP. Client and server share the cores, so the figure to compare is
// cpu-µs per operation (both sides together), which other load on the machine moves little; the
// rates are reported for the ratios.

func benchAddRequest(branch string, i int) *historyv1.AddMessageRequest {
	return benchAddRequestOf(branch, i, 1000)
}

func benchAddRequestOf(branch string, i, size int) *historyv1.AddMessageRequest {
	return &historyv1.AddMessageRequest{BranchId: branch, Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: fmt.Sprint(i, " ", strings.Repeat("x", size))},
	}}}
}

func benchBranches(b *testing.B, c *client.Client, n int) []string {
	b.Helper()
	ids := make([]string, n)
	for i := range ids {
		resp, err := c.History.CreateBranch(b.Context(), &historyv1.CreateBranchRequest{})
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = resp.GetBranch().GetId()
	}
	return ids
}

// BenchmarkAppendVsUnary runs the AppendMessages row and the unary row it is compared with. The
// append cases also run with omit_content (the answers are acknowledgements) and with 16 KB
// messages, where sending each message back weighs more.
func BenchmarkAppendVsUnary(b *testing.B) {
	for _, tc := range []struct {
		name string
		size int
		omit bool
	}{{"append", 1000, false}, {"append-omit", 1000, true}, {"append-16k", 16000, false}, {"append-16k-omit", 16000, true}} {
		b.Run(tc.name, func(b *testing.B) { benchAppend(b, tc.size, tc.omit) })
	}
	b.Run("unary-c50", benchUnary)
}

func benchAppend(b *testing.B, size int, omit bool) {
	c := benchClient(b)
	branches := benchBranches(b, c, 50)
	reqs := make([]*historyv1.AddMessageRequest, len(branches))
	for i, br := range branches {
		reqs[i] = benchAddRequestOf(br, i, size)
		reqs[i].OmitContent = omit
	}
	ap := c.NewAppender(b.Context(), client.WithAppendWindow(64))
	results := make(chan (<-chan client.AppendResult), 128)
	done := make(chan error, 1)
	go func() {
		var first error
		for ch := range results {
			if r := <-ch; r.Err != nil && first == nil {
				first = r.Err
			}
		}
		done <- first
	}()
	cpu := cputime.Process()
	b.ResetTimer()
	for i := range b.N {
		results <- ap.Append(b.Context(), reqs[i%len(reqs)])
	}
	close(results)
	err := <-done
	b.StopTimer()
	cpu = cputime.Process() - cpu
	if cerr := ap.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "items/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/item")
}

func benchUnary(b *testing.B) {
	c := benchClient(b)
	branches := benchBranches(b, c, 50)
	var wg sync.WaitGroup
	per := (b.N + 49) / 50
	cpu := cputime.Process()
	b.ResetTimer()
	for w := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := benchAddRequest(branches[w], w)
			for range per {
				if _, err := c.History.AddMessage(b.Context(), req); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	cpu = cputime.Process() - cpu
	b.ReportMetric(float64(per*50)/b.Elapsed().Seconds(), "calls/s")
	b.ReportMetric(float64(cpu.Microseconds())/float64(per*50), "cpu-µs/call")
}

func benchClient(b *testing.B) *client.Client {
	b.Helper()
	addr := startServerB(b)
	c, err := client.Dial(addr, client.WithInsecure(), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Close() })
	return c
}

// BenchmarkWatchBatches is 50 writers adding to one branch while n watchers (each its own
// connection, the client package's Watch asking for batches) receive every event (historybench's
// watch row); cpu-µs/write counts the fan-out, server and watchers.
func BenchmarkWatchBatches(b *testing.B) {
	for _, n := range []int{0, 100} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			addr := startServerB(b)
			c, err := client.Dial(addr, client.WithInsecure(), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			branch := benchBranches(b, c, 1)[0]
			ctx, cancel := context.WithCancel(b.Context())
			defer cancel()
			var (
				mu   sync.Mutex
				cond = sync.NewCond(&mu)
				last = make([]uint64, n)
				werr error
				wg   sync.WaitGroup
			)
			for i := range n {
				wc, err := client.Dial(addr, client.WithInsecure(), client.WithRetry(client.RetryPolicy{MaxAttempts: 1}))
				if err != nil {
					b.Fatal(err)
				}
				defer wc.Close()
				wg.Add(1)
				go func() {
					defer wg.Done()
					req := &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: proto.Uint64(0), BatchCommits: true}
					for commit, err := range wc.Watch(ctx, req) {
						mu.Lock()
						if err == nil {
							for _, ev := range commit.GetEvents() {
								if ev.GetSequence() != last[i]+1 && werr == nil {
									werr = fmt.Errorf("watcher %d got %d after %d", i, ev.GetSequence(), last[i])
								}
								last[i] = ev.GetSequence()
							}
						} else if ctx.Err() == nil && werr == nil {
							werr = err
						}
						cond.Broadcast()
						mu.Unlock()
						if err != nil {
							return
						}
					}
				}()
			}
			defer wg.Wait()
			defer cancel()
			waitAll := func(seq uint64) {
				mu.Lock()
				defer mu.Unlock()
				for {
					if werr != nil {
						b.Fatal(werr)
					}
					behind := false
					for _, l := range last {
						behind = behind || l < seq
					}
					if !behind {
						return
					}
					cond.Wait()
				}
			}
			waitAll(1)
			per := (b.N + 49) / 50
			cpu := cputime.Process()
			b.ResetTimer()
			var wwg sync.WaitGroup
			for w := range 50 {
				wwg.Add(1)
				go func() {
					defer wwg.Done()
					req := benchAddRequest(branch, w)
					for range per {
						if _, err := c.History.AddMessage(ctx, req); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wwg.Wait()
			elapsed := b.Elapsed()
			waitAll(uint64(per*50) + 1)
			b.StopTimer()
			cpu = cputime.Process() - cpu
			b.ReportMetric(float64(per*50)/elapsed.Seconds(), "writes/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(per*50), "cpu-µs/write")
		})
	}
}

// startServerB is startServer for a benchmark, without the memory budget (the runs store many
// messages).
func startServerB(b *testing.B) string {
	b.Helper()
	return startServerWith(b, nil, store.WithMemoryBudget(0))
}
