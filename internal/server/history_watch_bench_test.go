package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/cputime"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// benchServer is a HistoryService over st on bufconn, with the production interceptor chain.
type benchServer struct {
	st  *store.Memory
	lis *bufconn.Listener
}

func newBenchServer(b *testing.B, opts ...store.Option) *benchServer {
	b.Helper()
	st := store.NewMemory(append([]store.Option{store.WithMemoryBudget(0)}, opts...)...)
	srv := New(nil)
	RegisterHistory(srv, st)
	lis := bufconn.Listen(1 << 20)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	b.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-served
	})
	return &benchServer{st: st, lis: lis}
}

// client opens a connection of its own (one carries at most 100 streams).
func (s *benchServer) client(b *testing.B) historyv1.HistoryServiceClient {
	b.Helper()
	conn, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return s.lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	return historyv1.NewHistoryServiceClient(conn)
}

// benchWatchers opens n WatchBranch streams on branch (50 to a connection) and reads them in n
// goroutines, each storing its cursor in progress[i] after every frame and poking progressed.
// The goroutines end when the streams do; the returned wait waits for them and returns how many
// were evicted (and then resumed, as a client would).
func benchWatchers(b *testing.B, s *benchServer, branch string, n int, progress []atomic.Uint64, progressed chan<- struct{}) (wait func() int) {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var clients []historyv1.HistoryServiceClient
	for range (n + 49) / 50 {
		clients = append(clients, s.client(b))
	}
	var wg sync.WaitGroup
	var evicted atomic.Int64
	started := make(chan struct{}, n)
	for i := range n {
		wg.Add(1)
		go func() { // owned by wait: it cancels ctx and waits
			defer wg.Done()
			var after *uint64
			for {
				w, err := clients[i/50].WatchBranch(ctx, &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: after})
				if err != nil {
					return
				}
				for {
					f, err := w.Recv()
					if status.Code(err) == codes.ResourceExhausted {
						evicted.Add(1)
						cur := progress[i].Load()
						after = &cur
						break
					}
					if err != nil {
						return
					}
					if st := f.GetStart(); st != nil {
						progress[i].Store(st.GetAfterSequence())
						if after == nil {
							started <- struct{}{}
						}
						continue
					}
					progress[i].Store(max(f.GetCommit().GetLastSequence(), f.GetHeartbeat().GetHeadSequence()))
					select {
					case progressed <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	for range n {
		<-started
	}
	return func() int {
		cancel()
		wg.Wait()
		return int(evicted.Load())
	}
}

// slowest returns the smallest cursor in progress.
func slowest(progress []atomic.Uint64) uint64 {
	low := progress[0].Load()
	for i := range progress {
		low = min(low, progress[i].Load())
	}
	return low
}

// BenchmarkWatchDelivery is events per second delivered to 1, 10 and 100 WatchBranch streams on one
// branch, every watcher receiving every event and none evicted at the default buffer (issue 5
// acceptance). The writer is the store itself (a 1 KB instruction per event), kept at most half a
// buffer ahead of the slowest watcher: the figure is the fan-out's sustained rate, not a burst that
// buffers absorb. Clients, server and writer share the machine's cores; cpu-µs/delivery (the
// process's CPU time, server and clients together) is the figure that other load on the machine
// does not move.
func BenchmarkWatchDelivery(b *testing.B) {
	for _, n := range []int{1, 10, 100} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			s := newBenchServer(b)
			ctx := context.Background()
			res, err := s.st.CreateBranch(ctx, store.CreateBranchInput{})
			if err != nil {
				b.Fatal(err)
			}
			id := res.Branch.ID
			progress := make([]atomic.Uint64, n)
			progressed := make(chan struct{}, 1)
			wait := benchWatchers(b, s, id.String(), n, progress, progressed)
			in := store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(strings.Repeat("x", 1000))}}
			const window = store.DefaultSubscriberBuffer / 2
			head := uint64(1)
			b.ResetTimer()
			cpu := cputime.Process()
			for range b.N {
				for head-slowest(progress) >= window {
					<-progressed
				}
				r, err := s.st.AddMessage(ctx, id, in, store.WriteOptions{})
				if err != nil {
					b.Fatal(err)
				}
				head = r.Head
			}
			for slowest(progress) < head {
				<-progressed
			}
			b.StopTimer()
			cpu = cputime.Process() - cpu
			if ev := wait(); ev > 0 {
				b.Fatalf("%d watchers evicted at the default buffer", ev)
			}
			secs := b.Elapsed().Seconds()
			b.ReportMetric(float64(b.N)/secs, "events/s")
			b.ReportMetric(float64(b.N*n)/secs, "deliveries/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*n), "cpu-µs/delivery")
		})
	}
}

// BenchmarkWatchAddMessage is AddMessage through gRPC on one branch with 0 and 100 WatchBranch
// streams open on it (issue 5: the writer never waits for a watcher; what do watchers cost it?).
// Writers run in parallel (GOMAXPROCS of them); a watcher that falls behind is evicted and
// resumes, as a client would, and the evictions are reported. Clients, server and writers share
// the machine's cores, so the ratio, not the absolute figure, is the finding.
func BenchmarkWatchAddMessage(b *testing.B) {
	for _, n := range []int{0, 100} {
		b.Run(fmt.Sprintf("watchers=%d", n), func(b *testing.B) {
			s := newBenchServer(b)
			c := s.client(b)
			branch := uuid.NewString()
			if _, err := c.CreateBranch(context.Background(), &historyv1.CreateBranchRequest{BranchId: branch}); err != nil {
				b.Fatal(err)
			}
			wait := func() int { return 0 }
			if n > 0 {
				wait = benchWatchers(b, s, branch, n, make([]atomic.Uint64, n), make(chan struct{}, 1))
			}
			text := strings.Repeat("x", 1000)
			b.ResetTimer()
			cpu := cputime.Process()
			b.RunParallel(func(pb *testing.PB) {
				req := &historyv1.AddMessageRequest{BranchId: branch, Input: instructionInput(text)}
				for pb.Next() {
					if _, err := c.AddMessage(context.Background(), req); err != nil && !errors.Is(err, context.Canceled) {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			cpu = cputime.Process() - cpu
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "writes/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/write")
			b.ReportMetric(float64(wait()), "evictions")
		})
	}
}
