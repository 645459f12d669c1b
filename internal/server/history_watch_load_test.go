package server

import (
	"context"
	"crypto/sha256"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// loadContext bounds a load test's calls: generous, since the race detector slows 10,000 writes to
// many seconds, yet a hang still fails the test.
func loadContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// writeEvents writes to b until its head reaches head: instructions, and every 25th write a tool
// call answered by CreateActionResponse (a commit of two events). It returns the message id each
// message-writing sequence wrote, the truth the watchers' events are checked against.
func writeEvents(t *testing.T, c historyv1.HistoryServiceClient, b string, from, head uint64, text string) map[uint64]string {
	t.Helper()
	wrote := map[uint64]string{}
	ctx := loadContext(t)
	for i, h := 0, from; h < head; i++ {
		if i%25 == 24 && head-h >= 3 {
			call, err := c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionRequest{
				ActionRequest: &historyv1.ActionRequestInput{Function: "f"}}})
			if err != nil {
				t.Errorf("AddMessage: %v", err)
				return wrote
			}
			res, err := c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: b, ActionRequestId: call.GetMessage().GetId()})
			if err != nil {
				t.Errorf("CreateActionResponse: %v", err)
				return wrote
			}
			h = res.GetHeadSequence()
			wrote[call.GetHeadSequence()], wrote[h-1], wrote[h] = call.GetMessage().GetId(), res.GetActionResponse().GetId(), call.GetMessage().GetId()
			continue
		}
		resp, err := c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: instructionInput(text + strconv.Itoa(i))})
		if err != nil {
			t.Errorf("AddMessage: %v", err)
			return wrote
		}
		h = resp.GetHeadSequence()
		wrote[h] = resp.GetMessage().GetId()
	}
	return wrote
}

// checkTruth fails the test unless the sessions together saw every sequence from first to head,
// each message event carrying the message the writer wrote at that sequence.
func checkTruth(t *testing.T, first, head uint64, wrote map[uint64]string, sessions ...watchSession) {
	t.Helper()
	history, _ := mergeEvents(sessions)
	for seq := first; seq <= head; seq++ {
		ev, ok := history[seq]
		switch {
		case !ok:
			t.Fatalf("no watcher saw sequence %d", seq)
		case wrote[seq] != "" && ev.GetMessage().GetId() != wrote[seq]:
			t.Fatalf("sequence %d carries message %s, the writer wrote %s", seq, ev.GetMessage().GetId(), wrote[seq])
		}
	}
}

// TestWatchBranchResumeAfterRandomDisconnects: issue 5 acceptance: a client that disconnects at 50
// random points while 10,000 events are written, and each time resumes after the last sequence it
// received (with the incarnation), loses and repeats nothing (docs/design.md#sequences: replay-then-live with no
// gap and no duplicate). Evictions, should the race detector slow the reader that much, are resumed
// the same way.
func TestWatchBranchResumeAfterRandomDisconnects(t *testing.T) {
	const events, reconnects = 10_000, 50
	f := newWatchFixture(t, []store.Option{store.WithEventRetention(2 * events)})
	created, err := f.c.CreateBranch(testContext(t), &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, inc := created.GetBranch().GetId(), created.GetBranch().GetIncarnation()
	head := uint64(1 + events)
	var wrote map[uint64]string
	written := make(chan struct{})
	t.Cleanup(func() { <-written })
	go func() { // owned by this test: it waits on written, also when it fails early
		defer close(written)
		wrote = writeEvents(t, f.watchClient(t), b, 1, head, "i")
	}()

	// The disconnects: 50 random cursors, each stream read until it passes the next one.
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	points := make([]uint64, reconnects)
	for i := range points {
		points[i] = 1 + rng.Uint64N(head-1)
	}
	slices.Sort(points)
	var sess watchSession
	cursor, evicted := uint64(0), 0
	for i := 0; i <= reconnects; {
		ctx, cancel := context.WithCancel(loadContext(t))
		s, rec := openWatch(ctx, t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(cursor), Incarnation: &inc})
		target := head // the last stream reads to the head, once the writer is done
		if i < reconnects {
			target = points[i]
		} else {
			<-written
		}
		if recvUntil(s, rec, through(target)) {
			if status.Code(rec.end) != codes.ResourceExhausted {
				t.Fatalf("stream %d ended with %v", len(sess), rec.end)
			}
			evicted++ // resumed like a disconnect, which does not count as one
		} else {
			i++
		}
		cancel() // the disconnect
		sess = append(sess, rec)
		cursor = rec.cursor()
	}
	t.Logf("%d streams (%d of them evicted) to read %d events", len(sess), evicted, events)
	mustValid(t, sess)
	checkTruth(t, 1, head, wrote, sess)
}

// bigText is an instruction of about 16 KiB, so that a few frames fill a stalled client's window.
var bigText = strings.Repeat("x", 16<<10)

// stalledWatchClient is a client with HTTP/2 windows at their 64 KiB minimum (which also turns off
// window growth), so that a server stream blocks once that much is unread.
func stalledWatchClient(t *testing.T, f *watchFixture) historyv1.HistoryServiceClient {
	return f.watchClient(t, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
}

// TestWatchBranchStalledSubscriberEvicted: issue 5 acceptance; docs/design.md#sequences: "The writer never waits
// for a watcher: each subscriber has a bounded buffer, and one that falls behind is ended with
// RESOURCE_EXHAUSTED and its last delivered sequence, so it can resume". A subscriber that stops
// reading, with a buffer of 1, is evicted (reason SUBSCRIBER_TOO_SLOW, lastSequence its cursor)
// while three others and the writer keep going (the writer moves in step with the three and never
// with the stalled one); resuming from the evicted cursor is gap-free.
func TestWatchBranchStalledSubscriberEvicted(t *testing.T) {
	const writes = 32
	f := newWatchFixture(t, []store.Option{store.WithSubscriberBuffer(1)}, WithSendTimeout(time.Hour))
	b := f.create(t, nil)
	ctx := testContext(t)
	stalled, stalledRec := openWatch(ctx, t, stalledWatchClient(t, f), &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(1)})

	type healthy struct {
		s   historyv1.HistoryService_WatchBranchClient
		rec *watchStream
	}
	var others []healthy
	for range 3 {
		s, rec := openWatch(ctx, t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(1)})
		others = append(others, healthy{s, rec})
	}
	wrote := map[uint64]string{}
	for i := range writes {
		resp := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: instructionInput(bigText + strconv.Itoa(i))})
		wrote[resp.GetHeadSequence()] = resp.GetMessage().GetId()
		for _, o := range others { // in step with the healthy watchers, so their buffer of 1 never overflows
			if recvUntil(o.s, o.rec, through(resp.GetHeadSequence())) {
				t.Fatalf("a healthy watcher ended: %v", o.rec.end)
			}
		}
	}
	head := uint64(1 + writes)

	recvUntil(stalled, stalledRec, nil) // reads what the server had sent before evicting it
	checkStatus(t, stalledRec.end, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW,
		map[string]string{"branchId": b, "lastSequence": strconv.FormatUint(stalledRec.cursor(), 10)})
	if err := wait(t, f.ended); !errors.Is(err, store.ErrSubscriberTooSlow) {
		t.Errorf("the stalled stream's handler ended with %v, want the eviction", err)
	}
	if stalledRec.cursor() >= head {
		t.Fatalf("the stalled client got everything (cursor %d): it was never behind", stalledRec.cursor())
	}
	s, rec := openWatch(ctx, t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(stalledRec.cursor())})
	recvUntil(s, rec, through(head))
	sessions := []watchSession{{stalledRec, rec}}
	for _, o := range others {
		sessions = append(sessions, watchSession{o.rec})
	}
	mustValid(t, sessions...)
	checkTruth(t, 2, head, wrote, sessions[0])
}

// TestWatchBranchSendTimeout: a client that stops reading while its buffer still has room is ended
// by the bounded send timeout, with RESOURCE_EXHAUSTED, reason SUBSCRIBER_TOO_SLOW and the cursor
// it reached (issue 5: "bounded send timeout").
func TestWatchBranchSendTimeout(t *testing.T) {
	f := newWatchFixture(t, nil, WithSendTimeout(50*time.Millisecond))
	b := f.create(t, nil)
	s, rec := openWatch(testContext(t), t, stalledWatchClient(t, f), &historyv1.WatchBranchRequest{BranchId: b})
	for i := range 32 {
		f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: instructionInput(bigText + strconv.Itoa(i))})
	}
	if err := wait(t, f.ended); !errors.Is(err, errSendTimeout) {
		t.Errorf("handler ended with %v, want the send timeout", err)
	}
	recvUntil(s, rec, nil)
	if ei, _ := wantStatus(t, rec.end, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW); ei.GetMetadata()["lastSequence"] == "" {
		t.Errorf("ErrorInfo %v has no lastSequence", ei)
	}
	mustValid(t, watchSession{rec}) // lastSequence: what the server knows was sent, at most the client's cursor
}

// fingerprint is what one watcher saw: each event's sequence and a digest of its bytes.
type fingerprint [][2]any

func fingerprintOf(t *testing.T, sess watchSession) fingerprint {
	var fp fingerprint
	for _, s := range sess {
		for _, ev := range s.events() {
			b, err := proto.MarshalOptions{Deterministic: true}.Marshal(ev)
			if err != nil {
				t.Error(err)
			}
			fp = append(fp, [2]any{ev.GetSequence(), sha256.Sum256(b)})
		}
	}
	return fp
}

// TestWatchBranchThousandWatchers: issue 5 acceptance: 1,000 concurrent watchers on one branch,
// opened while the writer runs (so some join during the replay, some live), all see the same
// sequence of events, each stream valid, none evicted at the default buffer.
func TestWatchBranchThousandWatchers(t *testing.T) {
	const watchers, conns, writes = 1000, 20, 60
	f := newWatchFixture(t, nil)
	b := f.create(t, nil)
	head := uint64(1 + writes)
	clients := make([]historyv1.HistoryServiceClient, conns)
	for i := range clients {
		clients[i] = f.watchClient(t)
	}
	written := make(chan struct{})
	t.Cleanup(func() { <-written })
	var wrote map[uint64]string
	go func() { // owned by this test: it waits on written
		defer close(written)
		wrote = writeEvents(t, f.watchClient(t), b, 1, head, "w")
	}()
	prints := make([]fingerprint, watchers)
	var first *watchStream
	var wg sync.WaitGroup
	for i := range watchers {
		wg.Add(1)
		go func() { // owned by this test: wg.Wait
			defer wg.Done()
			ctx, cancel := context.WithCancel(loadContext(t))
			defer cancel()
			s, err := clients[i%conns].WatchBranch(ctx, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(0)})
			if err != nil {
				t.Errorf("watcher %d: %v", i, err)
				return
			}
			rec := &watchStream{after: u64(0)}
			if recvUntil(s, rec, through(head)) {
				t.Errorf("watcher %d ended: %v", i, rec.end)
			}
			for _, err := range validateSessions(watchSession{rec}) {
				t.Errorf("watcher %d: %v", i, err)
			}
			prints[i] = fingerprintOf(t, watchSession{rec})
			if i == 0 {
				first = rec
			}
		}()
	}
	wg.Wait()
	<-written
	if len(prints[0]) != int(head) {
		t.Fatalf("watcher 0 saw %d events, want %d", len(prints[0]), head)
	}
	for i, p := range prints[1:] {
		if !slices.Equal(p, prints[0]) {
			t.Fatalf("watcher %d saw another sequence of events than watcher 0", i+1)
		}
	}
	checkTruth(t, 1, head, wrote, watchSession{first})
}

// TestWatchBranchDeepReplayWriterGoesOn (review: Subscribe copied the whole replay under the
// branch's write lock, and a replaying stream counted commits written meanwhile against its
// buffer). docs/design.md#sequences: "The writer never waits for a watcher: each
// subscriber has a bounded buffer"; ADR-0006 D4 as docs/design.md#observers puts it in Go: the watch
// stream "reads the event log, which is written under the branch lock, in sequence order". Twenty
// streams with a deep cursor (after 1, a log of 16 KiB events) are stuck part way through their
// replays behind clients that do not read; the writer writes as many events again, with a
// subscriber buffer of one commit, and none of it waits or evicts a stream: a stream catching up
// reads the log, not its buffer. Once the clients read, every stream has every event once, in
// order, whole commits, with the writer's messages (the validator), and none was ended.
func TestWatchBranchDeepReplayWriterGoesOn(t *testing.T) {
	const watchers, backlog, during = 20, 150, 150
	f := newWatchFixture(t, []store.Option{store.WithSubscriberBuffer(1)}, WithSendTimeout(time.Hour))
	b := f.create(t, nil)
	wrote := writeEvents(t, f.c, b, 1, 1+backlog, bigText)
	ctx := loadContext(t)
	type stream struct {
		s   historyv1.HistoryService_WatchBranchClient
		rec *watchStream
	}
	streams := make([]stream, watchers)
	for i := range streams { // a connection each, so that each blocks on its own window
		s, rec := openWatch(ctx, t, stalledWatchClient(t, f), &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(1)})
		streams[i] = stream{s, rec}
	}
	head := uint64(1 + backlog + during)
	for seq, id := range writeEvents(t, f.c, b, 1+backlog, head, bigText) { // while all 20 replay
		wrote[seq] = id
	}
	var sessions []watchSession
	for i, s := range streams {
		if recvUntil(s.s, s.rec, through(head)) {
			t.Fatalf("watcher %d ended: %v", i, s.rec.end)
		}
		sessions = append(sessions, watchSession{s.rec})
	}
	mustValid(t, sessions...)
	checkTruth(t, 2, head, wrote, sessions[0])
	select {
	case err := <-f.ended:
		t.Errorf("a stream ended while catching up: %v", err)
	default:
	}
}

// TestWatchBranchDeepReplayWhileWriting: many streams with deep cursors catch up while a writer
// runs (docs/design.md#sequences: "it replays the retained events after the cursor, then goes live with no gap
// and no duplicate"; "The writer never waits for a watcher"). Each sees every event after its
// cursor exactly once, in order, across the replay, the switch to live and any resume after an
// eviction (the validator, etcd's robustness rules), and all agree on each event.
func TestWatchBranchDeepReplayWhileWriting(t *testing.T) {
	const watchers, conns, backlog, during = 16, 4, 1500, 1000
	f := newWatchFixture(t, []store.Option{store.WithEventRetention(2 * (backlog + during))})
	created, err := f.c.CreateBranch(testContext(t), &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, inc := created.GetBranch().GetId(), created.GetBranch().GetIncarnation()
	wrote := writeEvents(t, f.c, b, 1, 1+backlog, "b")
	head := uint64(1 + backlog + during)
	clients := make([]historyv1.HistoryServiceClient, conns)
	for i := range clients {
		clients[i] = f.watchClient(t)
	}
	ctx := loadContext(t)
	sessions := make([]watchSession, watchers)
	var first []historyv1.HistoryService_WatchBranchClient
	for i := range watchers { // every stream has its start frame before the writer begins
		s, rec := openWatch(ctx, t, clients[i%conns], &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(uint64(i)), Incarnation: &inc})
		first, sessions[i] = append(first, s), watchSession{rec}
	}
	written := make(chan map[uint64]string, 1)
	go func() { written <- writeEvents(t, f.watchClient(t), b, 1+backlog, head, "d") }() // owned by this test: it receives from written
	var wg sync.WaitGroup
	for i := range watchers {
		wg.Add(1)
		go func() { // owned by this test: wg.Wait
			defer wg.Done()
			s, rec := first[i], sessions[i][0]
			for recvUntil(s, rec, through(head)) { // ended: only an eviction is resumed
				if status.Code(rec.end) != codes.ResourceExhausted {
					t.Errorf("watcher %d ended with %v", i, rec.end)
					return
				}
				req := &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(rec.cursor()), Incarnation: &inc}
				ws, err := clients[i%conns].WatchBranch(ctx, req)
				if err != nil {
					t.Errorf("watcher %d resuming: %v", i, err)
					return
				}
				s, rec = ws, &watchStream{after: req.AfterSequence}
				sessions[i] = append(sessions[i], rec)
			}
		}()
	}
	for seq, id := range <-written {
		wrote[seq] = id
	}
	wg.Wait()
	resumes := 0
	for _, sess := range sessions {
		resumes += len(sess) - 1
	}
	t.Logf("%d watchers with deep cursors, %d resumes after an eviction", watchers, resumes)
	mustValid(t, sessions...)
	checkTruth(t, 1, head, wrote, sessions...)
}

// TestWatchBranchReplayOvertakenByRetention: a stream catching up from a deep cursor whose next
// events the log's retention evicts before the stream has read them ends as a too-slow one does
// (docs/design.md#sequences: "one that falls behind is ended with RESOURCE_EXHAUSTED and its last delivered
// sequence, so it can resume"), after every frame it was given and with no gap; resuming from
// that cursor is then OUT_OF_RANGE, HISTORY_COMPACTED, with the oldest available sequence ("A
// cursor older than what is retained ... ends with OUT_OF_RANGE and the oldest available sequence
// — never a silent restart").
func TestWatchBranchReplayOvertakenByRetention(t *testing.T) {
	const retention = 128
	f := newWatchFixture(t, []store.Option{store.WithEventRetention(retention)}, WithSendTimeout(time.Hour))
	created, err := f.c.CreateBranch(testContext(t), &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b, inc := created.GetBranch().GetId(), created.GetBranch().GetIncarnation()
	wrote := writeEvents(t, f.c, b, 1, retention, bigText) // retained 1..128
	s, rec := openWatch(testContext(t), t, stalledWatchClient(t, f), &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(0), Incarnation: &inc})
	head := uint64(2 * retention)
	writeEvents(t, f.c, b, retention, head, bigText) // retained 129..256: past the stalled replay
	if !recvUntil(s, rec, through(head)) {
		t.Fatal("the stalled stream read through the head: the log never overtook its replay")
	}
	checkStatus(t, rec.end, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_SUBSCRIBER_TOO_SLOW,
		map[string]string{"branchId": b, "lastSequence": strconv.FormatUint(rec.cursor(), 10)})
	if err := wait(t, f.ended); !errors.Is(err, store.ErrSubscriberTooSlow) {
		t.Errorf("the handler ended with %v, want the eviction", err)
	}
	if rec.cursor() >= retention {
		t.Fatalf("the stalled stream read through %d: the log never overtook it", rec.cursor())
	}
	mustValid(t, watchSession{rec})
	checkTruth(t, 1, rec.cursor(), wrote, watchSession{rec})
	checkStatus(t, startErr(t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(rec.cursor()), Incarnation: &inc}),
		codes.OutOfRange, historyv1.ErrorReason_ERROR_REASON_HISTORY_COMPACTED,
		map[string]string{"branchId": b, "oldestSequence": strconv.FormatUint(head-retention+1, 10), "headSequence": strconv.FormatUint(head, 10)})
}
