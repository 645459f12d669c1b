package postgres

import (
	"errors"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/migrations"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
	"github.com/historyd/historyd/internal/store/storetest"
)

// Issue 16: "replicas that start together migrate safely (an advisory
// lock)": two Migrate calls at once apply version 1 once between them.
func TestMigrateTogether(t *testing.T) {
	u := pgtest.New(t)
	var (
		wg      sync.WaitGroup
		applied [4][]int64
		errs    [4]error
	)
	for i := range applied {
		wg.Add(1)
		go func() {
			defer wg.Done()
			applied[i], errs[i] = Migrate(tctx(t), u)
		}()
	}
	wg.Wait()
	total := 0
	for i := range applied {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		total += len(applied[i])
	}
	supported, err := migrations.Supported(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	if total != int(supported) {
		t.Fatalf("4 migrations at once applied %v, want each of %d versions once", applied, supported)
	}
}

// NoAutoMigrate refuses a database with pending migrations at Open.
func TestNoAutoMigrateRefusesPending(t *testing.T) {
	cfg := testConfig(pgtest.New(t), storetest.Options{})
	cfg.NoAutoMigrate = true
	s, err := Open(tctx(t), cfg)
	if err == nil {
		s.Close()
		t.Fatal("Open with pending migrations and NoAutoMigrate succeeded")
	}
	if !errors.Is(err, migrations.ErrPending) {
		t.Fatalf("Open: %v, want migrations.ErrPending", err)
	}
}

// Target names host:port/dbname without the password; Stats counts the
// database's branches and messages and this replica's watchers.
func TestTargetAndStats(t *testing.T) {
	r := replicas(t, 2, nil)
	a, b := r[0], r[1]
	pu, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	if want := pu.Host + pu.Path; a.Target() != want {
		t.Fatalf("Target() = %q, want %q", a.Target(), want)
	}
	br := newBranch(t, a)
	add(t, a, br, "one", store.WriteOptions{})
	add(t, a, br, "two", store.WriteOptions{})
	newBranch(t, a)
	sub, err := b.Subscribe(tctx(t), br, store.SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if st := b.Stats(); st.Branches != 2 || st.Messages != 2 || st.Watchers != 1 {
		t.Fatalf("B's stats %+v, want 2 branches, 2 messages, 1 watcher", st)
	}
	if st := a.Stats(); st.Watchers != 0 {
		t.Fatalf("A's stats %+v: the watcher is B's", st)
	}
}

// Issue 16 retention across replicas: writers keep twice the retention,
// so a replica lagging by less reads on; one lagging by more ends its
// subscribers as too slow, and never panics.
func TestRetentionAcrossReplicas(t *testing.T) {
	const retention = 10
	r := replicas(t, 2, func(c *Config) { c.EventRetention = retention; c.SweepInterval = time.Hour })
	a, b := r[0], r[1]
	b.wake.drop.Store(true) // B hears of A's writes only when the test sweeps
	br := newBranch(t, a)
	sub, err := b.Subscribe(tctx(t), br, store.SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	var head uint64
	for i := range 2*retention - 2 { // within twice the retention
		head = add(t, a, br, msgText(i), store.WriteOptions{}).Head
	}
	b.sweep()
	expectCommits(t, sub, 1, head, 5*time.Second)
	for i := range 3 * retention { // beyond it
		add(t, a, br, msgText(i), store.WriteOptions{})
	}
	b.sweep()
	for {
		_, err := sub.Next(tctx(t))
		if err != nil {
			if !errors.Is(err, store.ErrSubscriberTooSlow) {
				t.Fatalf("the lagging replica's subscriber ended with %v, want ErrSubscriberTooSlow", err)
			}
			break
		}
	}
	// A new subscription on B works from the retained log.
	sub2, err := b.Subscribe(tctx(t), br, store.SubscribeInput{After: &head})
	if err == nil {
		sub2.Close()
		t.Fatalf("B accepted cursor %d, older than the retained log", head)
	}
	sub3, err := b.Subscribe(tctx(t), br, store.SubscribeInput{})
	if err != nil {
		t.Fatal(err)
	}
	defer sub3.Close()
	last := add(t, a, br, "after", store.WriteOptions{}).Head
	b.sweep()
	expectCommits(t, sub3, last-1, last, 5*time.Second)
}

// A deleted branch's events stay for the grace (every replica's
// subscribers read through BRANCH_DELETED), then any replica's janitor
// deletes them.
func TestJanitorDeletesDeadLogs(t *testing.T) {
	s := replicas(t, 1, nil)[0]
	br := newBranch(t, s)
	add(t, s, br, "x", store.WriteOptions{})
	if _, err := s.DeleteBranch(tctx(t), br, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	count := func() (n int) {
		if err := s.pool.QueryRow(tctx(t), `SELECT count(*) FROM events`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := s.cleanUp(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 3 {
		t.Fatalf("%d events within the grace, want the deleted branch's 3", n)
	}
	old := deadGrace
	deadGrace = 0
	defer func() { deadGrace = old }()
	if err := s.cleanUp(tctx(t)); err != nil {
		t.Fatal(err)
	}
	if n := count(); n != 0 {
		t.Fatalf("%d events past the grace, want none", n)
	}
}
