package client_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// sequences records the sequences of the events a watch yielded, and checks that they are
// 1, 2, 3, ... with none missing or repeated (docs/design.md#sequences: "no gap and
// no duplicate").
type sequences struct {
	t    *testing.T
	seen []uint64
}

func (s *sequences) add(c *historyv1.BranchCommit) uint64 {
	s.t.Helper()
	for _, ev := range c.GetEvents() {
		want := uint64(len(s.seen) + 1)
		if ev.GetSequence() != want {
			s.t.Fatalf("event sequence %d after %d events, want %d (a gap or a duplicate)", ev.GetSequence(), len(s.seen), want)
		}
		s.seen = append(s.seen, ev.GetSequence())
	}
	return c.GetLastSequence()
}

// add writes n instructions to branch through c.
func add(t *testing.T, c *client.Client, branch string, n int, text string) {
	t.Helper()
	for i := range n {
		if _, err := c.History.AddMessage(testContext(t), &historyv1.AddMessageRequest{BranchId: branch, Input: instruction(fmt.Sprint(i, text))}); err != nil {
			t.Fatal(err)
		}
	}
}

// Issue 8: "a Watch helper that resumes from the last sequence after a disconnect". The proxy cuts
// the watch's connection mid-stream; more writes land while it is down; the helper reconnects with
// the last sequence and the incarnation and yields every event once, in order.
func TestWatchResumesAfterDisconnect(t *testing.T) {
	addr := startServer(t)
	direct := dial(t, addr)
	p := newProxy(t, addr)
	c := dial(t, p.Addr())
	branch := newBranch(t, direct)
	add(t, direct, branch, 10, "before")

	var resumes []client.Resume
	seqs := &sequences{t: t}
	ctx := testContext(t)
	for commit, err := range c.Watch(ctx, &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: proto.Uint64(0)},
		client.OnResume(func(r client.Resume) { resumes = append(resumes, r) })) {
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		switch seqs.add(commit) {
		case 11: // the replay is done: cut the connection, then write while it is down
			p.Cut()
			add(t, direct, branch, 10, "while cut")
		case 16:
			p.Cut() // and once more, in the middle of what the first cut missed
		case 21:
			add(t, direct, branch, 5, "after")
		}
		if len(seqs.seen) == 26 {
			break
		}
	}
	if len(seqs.seen) != 26 {
		t.Fatalf("watch ended after %d events, want 26", len(seqs.seen))
	}
	if len(resumes) < 2 {
		t.Fatalf("resumes = %+v, want one for each cut", resumes)
	}
	for _, r := range resumes {
		if status.Code(r.Cause) != codes.Unavailable {
			t.Errorf("resume after %d caused by %v, want UNAVAILABLE", r.After, r.Cause)
		}
	}
	if resumes[0].After != 11 {
		t.Errorf("first resume after sequence %d, want 11, the last received", resumes[0].After)
	}
	if p.Accepted() < 3 {
		t.Errorf("proxy accepted %d connections, want one more for each cut", p.Accepted())
	}
}

// Issue 8: the helper "resumes from the last sequence after ... an eviction (SUBSCRIBER_TOO_SLOW)".
// The watcher stops reading while 200 commits are written: with a 64 KiB flow-control window the
// server cannot send them, its 2-commit buffer overflows and the stream is ended as too slow
// (docs/design.md#sequences: "one that falls behind is ended with RESOURCE_EXHAUSTED and its last delivered
// sequence"); the helper resumes and nothing is lost.
func TestWatchResumesAfterEviction(t *testing.T) {
	addr := startServer(t, store.WithSubscriberBuffer(2))
	direct := dial(t, addr)
	c := dial(t, addr, client.WithDialOptions(
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))) // no window growth
	branch := newBranch(t, direct)

	var resumes []client.Resume
	seqs := &sequences{t: t}
	big := strings.Repeat("x", 1000)
	for commit, err := range c.Watch(testContext(t), &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: proto.Uint64(0)},
		client.OnResume(func(r client.Resume) { resumes = append(resumes, r) })) {
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if seqs.add(commit) == 1 {
			add(t, direct, branch, 200, big) // the watch is not read meanwhile
		}
		if len(seqs.seen) == 201 {
			break
		}
	}
	if len(seqs.seen) != 201 {
		t.Fatalf("watch ended after %d events, want 201", len(seqs.seen))
	}
	if len(resumes) == 0 {
		t.Fatal("no resume: the stalled watcher was not evicted (the test proves nothing)")
	}
	for _, r := range resumes {
		if client.Reason(r.Cause) != historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW {
			t.Errorf("resume after %d caused by %v, want SUBSCRIBER_TOO_SLOW", r.After, r.Cause)
		}
	}
}

// Issue 8: the helper "surfaces HISTORY_COMPACTED as a typed error": a cursor older than the
// retained log (here 5 events) ends the watch with a *CompactedError carrying the oldest retained
// sequence, never a silent restart (docs/design.md#sequences).
func TestWatchCompacted(t *testing.T) {
	addr := startServer(t, store.WithEventRetention(5))
	c := dial(t, addr)
	branch := newBranch(t, c)
	add(t, c, branch, 20, "")
	var got error
	for commit, err := range c.Watch(testContext(t), &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: proto.Uint64(1)}) {
		if err == nil {
			t.Fatalf("watch yielded commit %d from a compacted cursor", commit.GetLastSequence())
		}
		got = err
	}
	var ce *client.CompactedError
	if !errors.As(got, &ce) || !errors.Is(got, client.ErrHistoryCompacted) {
		t.Fatalf("watch ended with %v, want a *CompactedError", got)
	}
	if ce.OldestSequence != 17 || ce.After != 1 || ce.BranchID != branch || status.Code(ce) != codes.OutOfRange {
		t.Errorf("CompactedError = %+v, want oldest 17 (21 events, 5 retained) after 1 on %s, OUT_OF_RANGE", ce, branch)
	}
}

// The same while resuming: the log is compacted past the cursor while the watcher is cut off, so
// the resumption cannot continue and says so.
func TestWatchCompactedWhileDisconnected(t *testing.T) {
	addr := startServer(t, store.WithEventRetention(5))
	direct := dial(t, addr)
	p := newProxy(t, addr)
	c := dial(t, p.Addr())
	branch := newBranch(t, direct)
	add(t, direct, branch, 2, "")
	seqs := &sequences{t: t}
	var got error
	for commit, err := range c.Watch(testContext(t), &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: proto.Uint64(0)}) {
		if err != nil {
			got = err
			break
		}
		if seqs.add(commit) == 3 {
			p.Cut()
			add(t, direct, branch, 20, "") // 23 events; the log keeps 19 to 23
		}
	}
	var ce *client.CompactedError
	if !errors.As(got, &ce) || ce.After != 3 || ce.OldestSequence != 19 {
		t.Fatalf("watch ended with %v, want a *CompactedError after 3, oldest 19", got)
	}
	if len(seqs.seen) != 3 {
		t.Errorf("%d events yielded, want 3", len(seqs.seen))
	}
}

// A deleted branch ends the watch without an error, after the BRANCH_DELETED commit (the RPC's
// guarantees: NOT_FOUND right after it).
func TestWatchEndsAfterDelete(t *testing.T) {
	c := dial(t, startServer(t))
	branch := newBranch(t, c)
	var kinds []historyv1.EventKind
	for commit, err := range c.Watch(testContext(t), &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: proto.Uint64(0)}) {
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		for _, ev := range commit.GetEvents() {
			kinds = append(kinds, ev.GetKind())
		}
		if len(kinds) == 1 {
			if _, err := c.History.DeleteBranch(testContext(t), &historyv1.DeleteBranchRequest{BranchId: branch}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if fmt.Sprint(kinds) != "[EVENT_KIND_BRANCH_CREATED EVENT_KIND_BRANCH_DELETED]" {
		t.Errorf("events %v, want created then deleted", kinds)
	}
}

// An unknown branch is an error, not a retry loop.
func TestWatchUnknownBranch(t *testing.T) {
	c := dial(t, startServer(t))
	n := 0
	for _, err := range c.Watch(testContext(t), &historyv1.WatchBranchRequest{BranchId: "0c0ffee0-0000-4000-8000-00000000dead"}) {
		n++
		if client.Reason(err) != historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND {
			t.Errorf("watch of an unknown branch: %v, want BRANCH_NOT_FOUND", err)
		}
	}
	if n != 1 {
		t.Errorf("%d yields, want the one error", n)
	}
}

// Issue 21: with batch_commits the server sends the commits a watcher is behind on in `commits`
// frames; Watch yields them one at a time, in order, as it yields `commit` frames.
func TestWatchBatchedCommits(t *testing.T) {
	c := dial(t, startServer(t))
	branch := newBranch(t, c)
	add(t, c, branch, 30, "m")
	seqs := &sequences{t: t}
	for commit, err := range c.Watch(testContext(t), &historyv1.WatchBranchRequest{BranchId: branch, AfterSequence: proto.Uint64(0), BatchCommits: true}) {
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		if seqs.add(commit) == 31 {
			break
		}
	}
	if len(seqs.seen) != 31 {
		t.Fatalf("watch yielded %d events, want 31", len(seqs.seen))
	}
}
