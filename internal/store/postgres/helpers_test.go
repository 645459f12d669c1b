package postgres

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
	"github.com/historyd/historyd/internal/store/storetest"
)

func tctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// replicas opens n Stores over one fresh schema: n replicas of one
// database. mod adjusts each one's configuration.
func replicas(t testing.TB, n int, mod func(*Config)) []*Store {
	t.Helper()
	url := pgtest.New(t)
	out := make([]*Store, n)
	for i := range out {
		cfg := testConfig(url, storetest.Options{})
		if mod != nil {
			mod(&cfg)
		}
		out[i] = openReady(t, cfg)
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond) // a poll of a condition, with a deadline
	}
}

// listening waits until each Store holds its LISTEN connection.
func listening(t testing.TB, ss ...*Store) {
	t.Helper()
	for _, s := range ss {
		waitFor(t, 10*time.Second, "the listener connected", func() bool { return s.wake.listening.Load() > 0 })
	}
}

func newBranch(t testing.TB, s *Store) uuid.UUID {
	t.Helper()
	res, err := s.CreateBranch(tctx(t), store.CreateBranchInput{})
	if err != nil {
		t.Fatal(err)
	}
	return res.Branch.ID
}

func add(t testing.TB, s *Store, b uuid.UUID, text string, opts store.WriteOptions) store.WriteResult {
	t.Helper()
	res, err := s.AddMessage(tctx(t), b, store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue(text)}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// fullOrder lists every message of a branch, in order.
func fullOrder(t testing.TB, s store.Store, b uuid.UUID) []store.StoredMessage {
	t.Helper()
	var out []store.StoredMessage
	in := store.ListInput{PageSize: 1000}
	for {
		p, err := s.ListMessages(tctx(t), b, in)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p.Messages...)
		if p.NextPageToken == "" {
			return out
		}
		in.PageToken = p.NextPageToken
	}
}

// expectCommits reads commits from sub until it has every sequence in
// (after, through], checking order and gaps, each within per.
func expectCommits(t testing.TB, sub *store.Subscription, after, through uint64, per time.Duration) {
	t.Helper()
	want := after + 1
	for want <= through {
		ctx, cancel := context.WithTimeout(context.Background(), per)
		c, err := sub.Next(ctx)
		cancel()
		if err != nil {
			t.Fatalf("waiting for sequence %d (through %d): %v", want, through, err)
		}
		for _, ev := range c {
			if ev.Sequence != want {
				t.Fatalf("got sequence %d, want %d: a gap, a duplicate or a reorder", ev.Sequence, want)
			}
			want++
		}
	}
}

func msgText(i int) string { return fmt.Sprintf("m%d", i) }

func addFactory(text string) store.Factory {
	return store.Factory{Instruction: jsonv.StringValue(text)}
}

func errorsIs(err, target error) bool { return errors.Is(err, target) }
