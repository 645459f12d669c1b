//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// Issue 16's Faults bullet: "kill -9 of one replica under load loses no acknowledged write", and
// its acceptance: "the crash harness's checker reused against a killed replica". The crash harness
// of issue 15 (crash_test.go) runs as it is: its writers (a request id on every write; branches of
// their own, made by CreateBranch, ImportBranch and ForkBranch, and one branch all of them append
// to), its model of what was acknowledged, its retry of the writes in flight at a kill and its
// checker. Here half the writers write on a replica that is killed with SIGKILL under load and
// half on a replica that survives; the writes in flight on the killed one are retried, with their
// request ids, on the survivor, where they must land once, and the checker reads the survivor.
// The harness's watches follow the killed replica and resume on the survivor from their cursors
// (issue 16: "the incarnation is the database's: a watcher moves from A to B with its cursor").

const (
	killRounds    = 2 // kills: the second moves the watches back onto a new replica and across again
	killMaxRounds = 4 // at most: while no kill has found a write in flight (no retry tested), another round runs
	killLoad      = 1500 * time.Millisecond
)

// TestReplicasKill prints `replicas kill: N kills, W acknowledged writes, R in flight retried on
// the survivor (C had committed on the killed replica), M watch moves, 0 lost, 0 duplicated, 0
// half-applied`, with the seed (HISTORYD_CRASH_SEED replays the writers' draws).
func TestReplicasKill(t *testing.T) {
	noLeaks(t)
	url := pgtest.New(t)
	r := newCrashRun(t, "postgres", crashSeed(t), 0, killMaxRounds)
	sp := startReplicas(t, url, 1)[0]
	survivor := historyClient(t, sp)
	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()
	begin := time.Now()
	defer func() { // also after a t.Fatal: the line gives the seed
		fmt.Printf("replicas kill: %d kills in %.1fs, %d acknowledged writes, %d in flight retried on the survivor (%d had committed on the killed replica), "+
			"%d watch moves, %d lost, %d duplicated, %d half-applied (seed=%d)\n", r.cycles, time.Since(begin).Seconds(), r.m.acked,
			r.retried, r.replayed, r.resumed, r.lost, r.duplicated, r.halfApplied, r.seed)
		r.reportViolations()
	}()
	for !r.failed && (r.cycles < killRounds || r.retried == 0 && r.cycles < killMaxRounds) {
		r.killReplica(ctx, url, survivor)
		r.cycles++
	}
	if r.failed {
		return
	}
	if r.retried == 0 {
		t.Errorf("%d kills and no write in flight at any: \"writes in flight on the killed one are retried on the survivor\" was not tested", r.cycles)
	}
	if r.resumed == 0 {
		t.Errorf("no watch moved from the killed replica to the survivor: \"a watcher moves from A to B with its cursor\" was not tested")
	}
	stopReplicas(t, sp)
}

// killReplica runs one round: a replica started on url takes half the writers and the watches,
// the survivor the other half; after killLoad the replica is killed with SIGKILL, the writes in
// flight on it are retried on the survivor, the survivor is checked against the model, and the
// watches resume on it.
func (r *crashRun) killReplica(ctx context.Context, url string, survivor historyv1.HistoryServiceClient) {
	victim := startReplicas(r.t, url, 1)[0]
	conn, err := grpc.NewClient(victim.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		r.t.Fatal(err)
	}
	defer conn.Close()
	onVictim := historyv1.NewHistoryServiceClient(conn)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()               // ends the watches' streams on the survivor
	r.resume(ctx, onVictim, nil) // the last round's watches, from the survivor back onto the new replica
	r.setup(ctx, onVictim)

	var killed atomic.Bool
	var hold crashHold // never held: the harness's writers take one
	var wg sync.WaitGroup
	for _, w := range r.watches {
		wg.Go(func() { r.follow(w, &killed) })
	}
	inFlight := make([]*crashOp, len(r.writers))
	for i, w := range r.writers {
		c := onVictim
		if i%2 == 1 {
			c = survivor
		}
		wg.Go(func() { inFlight[i] = r.write(ctx, c, w, &killed, &hold) })
	}
	crashWait(killLoad) // the kill's moment is the point, not a synchronisation
	killed.Store(true)
	stop(r.t, victim, syscall.SIGKILL, startTimeout)
	killedAt := time.Now()
	wg.Wait()
	for _, op := range inFlight {
		if op != nil {
			r.pending = append(r.pending, op)
		}
	}
	r.t.Logf("kill %d: %d writes in flight on the killed replica, %d acknowledged so far", r.cycles, len(r.pending), r.m.acked)
	r.retry(ctx, survivor, killedAt)
	read := r.check(ctx, survivor)
	r.resume(ctx, survivor, read)
}
