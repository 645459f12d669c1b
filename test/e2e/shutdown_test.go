//go:build e2e

package e2e

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The long-lived streams open when SIGTERM arrives: 100 WatchBranch streams (issue 7: "100 open
// watch streams") and some SubscribeInbox streams, whose shutdown hook is another one.
const (
	shutdownWatches = 100
	shutdownInboxes = 20
	shutdownStreams = shutdownWatches + shutdownInboxes
)

// streamOutcome is how one long-lived stream ended.
type streamOutcome struct {
	kind string
	err  error
}

// TestShutdownUnderLoad: with 100 WatchBranch streams (and 20 SubscribeInbox streams) open on the
// branch that AddMessage calls are writing to, SIGTERM makes every in-flight call end with OK or
// UNAVAILABLE (never a hang), ends every stream cleanly with UNAVAILABLE and reason
// SERVER_SHUTTING_DOWN (not a cut connection), and the process exits 0 well within the grace
// period (issue 7 acceptance; docs/development.md#style-lifecycle).
func TestShutdownUnderLoad(t *testing.T) {
	const grace = 5 * time.Second
	p := startServer(t, "--grace-period", grace.String())
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	control := dial(t, p)
	branch, err := historyv1.NewHistoryServiceClient(control).CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatalf("CreateBranch: %v", err)
	}
	branchID := branch.GetBranch().GetId()
	const owner = "eeeeeeee-eeee-4eee-8eee-eeeeeeeeeeee"
	if _, err := historyv1.NewExchangeServiceClient(control).Register(ctx, &historyv1.RegisterRequest{OwnerId: owner}); err != nil {
		t.Fatalf("Register: %v", err)
	}

	// The streams, over connections of their own (a connection carries at most 100 calls at once).
	newConn := func() *grpc.ClientConn {
		conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close() })
		return conn
	}
	streamConns := []*grpc.ClientConn{newConn(), newConn()}
	outcomes := make(chan streamOutcome, shutdownStreams)
	var opened sync.WaitGroup
	// Each stream's context is not the test's deadline: a stream that the server fails to end would
	// hang, and the wait below reports it. recv reads the first frame (the subscription is live
	// from then on), signals opened, then reads until the stream ends.
	follow := func(kind string, recv func() error) {
		err := recv()
		opened.Done()
		for err == nil {
			err = recv()
		}
		outcomes <- streamOutcome{kind, err}
	}
	for i := range shutdownStreams {
		opened.Add(1)
		conn := streamConns[i%len(streamConns)]
		if i < shutdownWatches {
			go func() {
				stream, err := historyv1.NewHistoryServiceClient(conn).WatchBranch(context.Background(), &historyv1.WatchBranchRequest{BranchId: branchID})
				follow("WatchBranch", func() error {
					if err != nil {
						return err
					}
					_, rerr := stream.Recv()
					return rerr
				})
			}()
			continue
		}
		go func() {
			stream, err := historyv1.NewExchangeServiceClient(conn).SubscribeInbox(context.Background(), &historyv1.SubscribeInboxRequest{OwnerId: owner})
			follow("SubscribeInbox", func() error {
				if err != nil {
					return err
				}
				_, rerr := stream.Recv()
				return rerr
			})
		}()
	}
	opened.Wait()

	// Writers: each calls AddMessage in a loop on its own connection until a call fails; each call
	// has a deadline far beyond the grace period, so a hang shows as DEADLINE_EXCEEDED.
	const writers = 8
	type writerResult struct {
		ok   int
		last error
	}
	results := make(chan writerResult, writers)
	warmed := make(chan struct{}, writers)
	for w := range writers {
		conn := newConn()
		go func() {
			history := historyv1.NewHistoryServiceClient(conn)
			var r writerResult
			for {
				callCtx, cancel := context.WithTimeout(context.Background(), 3*grace)
				_, err := history.AddMessage(callCtx, &historyv1.AddMessageRequest{
					BranchId: branchID,
					Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
						InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "writer " + string(rune('a'+w))},
					}},
				})
				cancel()
				if err != nil {
					r.last = err
					results <- r
					return
				}
				if r.ok++; r.ok == 5 {
					warmed <- struct{}{}
				}
			}
		}()
	}
	for range writers {
		<-warmed // every writer has calls going
	}

	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	deadline := time.NewTimer(grace + startTimeout)
	defer deadline.Stop()
	for range shutdownStreams {
		select {
		case o := <-outcomes:
			if status.Code(o.err) != codes.Unavailable || reasonOf(o.err) != "ERROR_REASON_SERVER_SHUTTING_DOWN" {
				t.Errorf("a %s stream ended with %v, want UNAVAILABLE with reason SERVER_SHUTTING_DOWN", o.kind, o.err)
			}
		case <-deadline.C:
			t.Fatalf("streams still open %v after SIGTERM", grace+startTimeout)
		}
	}
	total := 0
	for range writers {
		select {
		case r := <-results:
			total += r.ok
			if code := status.Code(r.last); code != codes.Unavailable {
				t.Errorf("a writer's call ended with %v, want UNAVAILABLE (calls before it: %d OK)", r.last, r.ok)
			}
		case <-deadline.C:
			t.Fatalf("AddMessage calls still unanswered %v after SIGTERM", grace+startTimeout)
		}
	}
	code, _ := wait(t, p, grace+startTimeout)
	elapsed := time.Since(start)
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if elapsed >= grace {
		t.Errorf("exit %v after SIGTERM, want within the grace period %v", elapsed, grace)
	}
	log := strings.Join(p.stderr.Lines(), "\n")
	if strings.Contains(log, "stopping forcibly") {
		t.Errorf("the shutdown had to cut RPCs off:\n%s", log)
	}
	t.Logf("SIGTERM to exit: %v; %d AddMessage calls answered OK before the shutdown refused more", elapsed, total)
}

// TestSecondSignalStopsAtOnce: a second SIGTERM during the grace period stops the server at once,
// cutting off what is still open, and the process still exits 0 (issue 7: "a second signal stops at
// once").
func TestSecondSignalStopsAtOnce(t *testing.T) {
	const grace = time.Minute
	p := startServer(t, "--grace-period", grace.String())
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	// A server stream that no shutdown hook ends (a reflection stream) holds the graceful stop for
	// the whole grace period.
	idle := openIdleStream(ctx, t, dial(t, p))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitLog(t, p, 0, `"msg":"shutting down"`)
	code, elapsed := stop(t, p, syscall.SIGTERM, startTimeout)
	if code != 0 {
		t.Errorf("exit code %d after the second signal, want 0", code)
	}
	if elapsed >= startTimeout {
		t.Errorf("exit took %v after the second signal", elapsed)
	}
	_, err := idle.Recv()
	if err == nil || errors.Is(err, io.EOF) {
		t.Errorf("the reflection stream ended with %v; want it cut off", err)
	}
	if log := strings.Join(p.stderr.Lines(), "\n"); !strings.Contains(log, "shutdown cut open RPCs off") {
		t.Errorf("no line saying the shutdown was forced:\n%s", log)
	}
}
