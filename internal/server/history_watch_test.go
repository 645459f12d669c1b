package server

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// TestWatchConvertedMessagesFieldCount guards the watch converters (docs/development.md#style-proto, etcd's trick): a new
// field breaks this test until history_watch*.go handles it.
func TestWatchConvertedMessagesFieldCount(t *testing.T) {
	checkFieldCounts(t, "history_watch*.go", []fieldCount{
		{&historyv1.WatchBranchRequest{}, 6},
		{&historyv1.WatchBranchResponse{}, 4},
		{&historyv1.BranchCommits{}, 1},
		{&historyv1.WatchStart{}, 5},
		{&historyv1.BranchCommit{}, 3},
		{&historyv1.BranchEvent{}, 7},
		{&historyv1.WatchHeartbeat{}, 2},
	})
}

// TestEventKindsMapped: every store event kind has a wire kind and back, and every wire kind but
// UNSPECIFIED has a store kind (docs/design.md#sequences: the seven kinds).
func TestEventKindsMapped(t *testing.T) {
	for k := store.EventBranchCreated; k <= store.EventBranchDeleted; k++ {
		pb, ok := eventKindToProto[k]
		if !ok || pb.String() != "EVENT_KIND_"+k.String() || eventKindFromProto[pb] != k {
			t.Errorf("store kind %v maps to %v", k, pb)
		}
	}
	for v := range historyv1.EventKind_name {
		if _, ok := eventKindFromProto[historyv1.EventKind(v)]; ok == (v == 0) {
			t.Errorf("wire kind %v mapped: %v", historyv1.EventKind(v), ok)
		}
	}
}

// TestWatchBranchReplayThenLive: docs/design.md#sequences: after_sequence 0 replays
// everything retained from BRANCH_CREATED (sequence 1, with the branch and its initial messages),
// then goes live with no gap and no duplicate; a frame carries one commit (two events for
// CreateActionResponse), each message as that event wrote it, with its index; the first frame
// confirms the cursor, the head and the incarnation; a cursor in the middle of a commit resumes
// with the rest of it.
func TestWatchBranchReplayThenLive(t *testing.T) {
	f := newWatchFixture(t, nil)
	ctx := testContext(t)
	created, err := f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{System: &historyv1.SystemInput{SystemMessage: strPtr("Be brief.")}})
	if err != nil {
		t.Fatal(err)
	}
	b := created.GetBranch().GetId()
	call := f.add(t, &historyv1.AddMessageRequest{BranchId: b, IncludeRendered: true, Input: &historyv1.AddMessageRequest_ActionRequest{
		ActionRequest: &historyv1.ActionRequestInput{Function: "add", ArgumentsJson: `{"a": 1}`},
	}}).GetMessage() // 2
	result, err := f.c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: b, ActionRequestId: call.GetId(), OutputJson: strPtr("2"), IncludeRendered: true})
	if err != nil { // 3 the response, 4 the request with its action_response_id
		t.Fatal(err)
	}

	s, rec := openWatch(ctx, t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(0), IncludeRendered: true})
	start := rec.frames[0].GetStart()
	if start.GetBranchId() != b || start.GetIncarnation() != created.GetBranch().GetIncarnation() ||
		start.GetAfterSequence() != 0 || start.GetHeadSequence() != 4 || start.GetOldestSequence() != 1 {
		t.Errorf("start = %v", start)
	}
	recvUntil(s, rec, through(4))
	if got := len(rec.frames); got != 4 {
		t.Fatalf("got %d frames for the replay of 3 commits: %v", got, rec.frames)
	}
	first := rec.frames[1].GetCommit()
	ev := first.GetEvents()[0]
	if ev.GetKind() != historyv1.EventKind_EVENT_KIND_BRANCH_CREATED || ev.GetSequence() != 1 || ev.GetBranch().GetId() != b ||
		len(ev.GetMessages()) != 1 || ev.GetMessages()[0].GetId() != created.GetSystem().GetId() || ev.GetMessages()[0].GetSequence() != 1 {
		t.Errorf("first event = %v", ev)
	}
	ev = rec.frames[2].GetCommit().GetEvents()[0]
	if ev.GetKind() != historyv1.EventKind_EVENT_KIND_MESSAGE_ADDED || ev.GetIndex() != 1 || ev.Index == nil ||
		!proto.Equal(ev.GetMessage(), call) || ev.GetMessage().GetActionRequest().GetActionResponseId() != "" {
		t.Errorf("the action request as it was added = %v, want %v", ev, call)
	}
	both := rec.frames[3].GetCommit()
	if both.GetFirstSequence() != 3 || both.GetLastSequence() != 4 || len(both.GetEvents()) != 2 {
		t.Fatalf("CreateActionResponse commit = %v, want one frame with events 3 and 4", both)
	}
	resp, req := both.GetEvents()[0], both.GetEvents()[1]
	if resp.GetKind() != historyv1.EventKind_EVENT_KIND_MESSAGE_ADDED || !proto.Equal(resp.GetMessage(), result.GetActionResponse()) || resp.GetIndex() != 2 {
		t.Errorf("response event = %v, want %v", resp, result.GetActionResponse())
	}
	if req.GetKind() != historyv1.EventKind_EVENT_KIND_MESSAGE_REPLACED || !proto.Equal(req.GetMessage(), result.GetActionRequest()) || req.GetIndex() != 1 {
		t.Errorf("request event = %v, want %v", req, result.GetActionRequest())
	}

	// Live, after the replay.
	live := f.instruction(t, b, "next") // 5
	recvUntil(s, rec, through(5))
	if got := rec.frames[len(rec.frames)-1].GetCommit().GetEvents(); len(got) != 1 || !proto.Equal(got[0].GetMessage(), live) {
		t.Errorf("live event = %v, want %v", got, live)
	}
	mustValid(t, watchSession{rec})

	// A cursor inside the commit 3-4 resumes with its rest.
	mid, midRec := openWatch(ctx, t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(3), Incarnation: strPtr(start.GetIncarnation())})
	recvUntil(mid, midRec, through(5))
	rest := midRec.frames[1].GetCommit()
	if rest.GetFirstSequence() != 3 || rest.GetLastSequence() != 4 || len(rest.GetEvents()) != 1 || rest.GetEvents()[0].GetSequence() != 4 {
		t.Errorf("resuming after 3 gave %v, want the rest of commit 3-4: event 4", rest)
	}
	mustValid(t, watchSession{midRec})
}

// TestWatchBranchFromNow: docs/design.md#sequences: "after_sequence absent = from now": no replay; the start frame
// names the head, and the first event is the next write.
func TestWatchBranchFromNow(t *testing.T) {
	f := newWatchFixture(t, nil)
	b := f.create(t, nil)
	f.instruction(t, b, "before")
	s, rec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b})
	if st := rec.frames[0].GetStart(); st.GetAfterSequence() != 2 || st.GetHeadSequence() != 2 {
		t.Errorf("start = %v, want after 2, head 2", st)
	}
	m := f.instruction(t, b, "after")
	recvUntil(s, rec, through(3))
	if evs := rec.events(); len(evs) != 1 || evs[0].GetMessage().GetId() != m.GetId() {
		t.Errorf("events %v, want only the write after the start", evs)
	}
	mustValid(t, watchSession{rec})
}

// TestWatchBranchStartErrors: the errors before the first frame (docs/design.md#sequences; history_service.proto WatchBranch): a cursor ahead of the head is INVALID_ARGUMENT naming
// after_sequence with the head; older than the log, or of another incarnation, OUT_OF_RANGE with
// the oldest available sequence — never a silent restart; an unknown branch NOT_FOUND; malformed
// ids and kinds INVALID_ARGUMENT naming the field.
func TestWatchBranchStartErrors(t *testing.T) {
	f := newWatchFixture(t, []store.Option{store.WithEventRetention(5)})
	b := f.create(t, nil)
	for i := range 10 {
		f.instruction(t, b, strconv.Itoa(i))
	} // head 11, retained 7..11
	inc, err := f.c.GetBranch(testContext(t), &historyv1.GetBranchRequest{BranchId: b})
	if err != nil {
		t.Fatal(err)
	}
	unknown := uuid.NewString()
	for _, tc := range []struct {
		name   string
		req    *historyv1.WatchBranchRequest
		code   codes.Code
		reason historyv1.ErrorReason
		md     map[string]string
	}{
		{"ahead of the head", &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(12)}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD,
			map[string]string{"field": "after_sequence", "branchId": b, "headSequence": "11"}},
		{"compacted", &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(5)}, codes.OutOfRange, historyv1.ErrorReason_ERROR_REASON_HISTORY_COMPACTED,
			map[string]string{"branchId": b, "oldestSequence": "7", "headSequence": "11"}},
		{"another incarnation", &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(10), Incarnation: strPtr(uuid.NewString())}, codes.OutOfRange,
			historyv1.ErrorReason_ERROR_REASON_HISTORY_COMPACTED, map[string]string{"branchId": b, "oldestSequence": "7", "headSequence": "11"}},
		{"unknown branch", &historyv1.WatchBranchRequest{BranchId: unknown}, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND,
			map[string]string{"branchId": unknown}},
		{"malformed branch id", &historyv1.WatchBranchRequest{BranchId: "nope"}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD,
			map[string]string{"field": "branch_id"}},
		{"malformed incarnation", &historyv1.WatchBranchRequest{BranchId: b, Incarnation: strPtr("nope")}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD,
			map[string]string{"field": "incarnation"}},
		{"unspecified kind", &historyv1.WatchBranchRequest{BranchId: b, Kinds: []historyv1.EventKind{historyv1.EventKind_EVENT_KIND_MESSAGE_ADDED, 0}}, codes.InvalidArgument,
			historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, map[string]string{"field": "kinds[1]"}},
		{"unknown kind", &historyv1.WatchBranchRequest{BranchId: b, Kinds: []historyv1.EventKind{99}}, codes.InvalidArgument,
			historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, map[string]string{"field": "kinds[0]"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkStatus(t, startErr(t, f.c, tc.req), tc.code, tc.reason, tc.md)
		})
	}
	// The oldest resumable cursor, with the right incarnation, works.
	s, rec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(6), Incarnation: strPtr(inc.GetBranch().GetIncarnation())})
	recvUntil(s, rec, through(11))
	mustValid(t, watchSession{rec})
}

// TestWatchBranchKinds: a kinds filter streams only those events, passes over commits with none,
// keeps each commit's bounds, and still ends with BRANCH_DELETED; heartbeats carry the head past
// the commits it passed over, so the heartbeat is a cursor that loses nothing.
func TestWatchBranchKinds(t *testing.T) {
	f := newWatchFixture(t, nil, WithHeartbeat(10*time.Millisecond))
	b := f.create(t, nil)
	s, rec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b, Kinds: []historyv1.EventKind{historyv1.EventKind_EVENT_KIND_SYSTEM_SET}})
	f.instruction(t, b, "passed over") // 2
	recvUntil(s, rec, through(2))      // a heartbeat at 2: nothing else can arrive
	if last := rec.frames[len(rec.frames)-1]; last.GetHeartbeat().GetHeadSequence() != 2 || len(rec.events()) != 0 {
		t.Errorf("frames %v, want only heartbeats, the last at head 2", rec.frames)
	}
	sys := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_System{System: &historyv1.SystemInput{}}}).GetMessage() // 3
	if _, err := f.c.DeleteBranch(testContext(t), &historyv1.DeleteBranchRequest{BranchId: b}); err != nil {                                              // 4
		t.Fatal(err)
	}
	recvUntil(s, rec, nil)
	var kinds []historyv1.EventKind
	for _, ev := range rec.events() {
		kinds = append(kinds, ev.GetKind())
	}
	if !slices.Equal(kinds, []historyv1.EventKind{historyv1.EventKind_EVENT_KIND_SYSTEM_SET, historyv1.EventKind_EVENT_KIND_BRANCH_DELETED}) ||
		rec.events()[0].GetMessage().GetId() != sys.GetId() {
		t.Errorf("filtered events %v", rec.events())
	}
	checkStatus(t, rec.end, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_DELETED, map[string]string{"branchId": b, "lastSequence": "4"})
	mustValid(t, watchSession{rec})
}

// TestWatchBranchHeartbeats: an idle stream gets heartbeats (docs/design.md#sequences: "idle streams get
// heartbeats that carry the head sequence"), each with the head it has caught up with and the time.
func TestWatchBranchHeartbeats(t *testing.T) {
	f := newWatchFixture(t, nil, WithHeartbeat(5*time.Millisecond))
	b := f.create(t, nil)
	s, rec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b})
	beats := 0
	recvUntil(s, rec, func(fr *historyv1.WatchBranchResponse) bool {
		if h := fr.GetHeartbeat(); h == nil || h.GetHeadSequence() != 1 || !h.GetTime().IsValid() {
			t.Fatalf("frame %v, want a heartbeat at head 1", fr)
		}
		beats++
		return beats == 3
	})
	f.instruction(t, b, "x")
	recvUntil(s, rec, func(fr *historyv1.WatchBranchResponse) bool { return fr.GetHeartbeat() != nil })
	if h := rec.frames[len(rec.frames)-1].GetHeartbeat(); h.GetHeadSequence() != 2 {
		t.Errorf("heartbeat after a write = %v, want head 2", h)
	}
	mustValid(t, watchSession{rec})
}

// TestWatchBranchDeleted: DeleteBranch ends every watcher with a final BRANCH_DELETED frame, then
// NOT_FOUND, reason BRANCH_DELETED, with the branch and that sequence; a resume finds no branch.
func TestWatchBranchDeleted(t *testing.T) {
	f := newWatchFixture(t, nil)
	b := f.create(t, nil)
	ctx := testContext(t)
	var recs []*watchStream
	var streams []historyv1.HistoryService_WatchBranchClient
	for range 3 {
		s, rec := openWatch(ctx, t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(0)})
		streams, recs = append(streams, s), append(recs, rec)
	}
	f.instruction(t, b, "x")
	del, err := f.c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: b})
	if err != nil {
		t.Fatal(err)
	}
	var sessions []watchSession
	for i, s := range streams {
		recvUntil(s, recs[i], nil)
		evs := recs[i].events()
		if last := evs[len(evs)-1]; last.GetKind() != historyv1.EventKind_EVENT_KIND_BRANCH_DELETED || last.GetSequence() != del.GetLastSequence() {
			t.Errorf("watcher %d: last event %v, want BRANCH_DELETED at %d", i, last, del.GetLastSequence())
		}
		checkStatus(t, recs[i].end, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_DELETED,
			map[string]string{"branchId": b, "lastSequence": strconv.FormatUint(del.GetLastSequence(), 10)})
		sessions = append(sessions, watchSession{recs[i]})
	}
	mustValid(t, sessions...)
	checkStatus(t, startErr(t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(del.GetLastSequence())}),
		codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND, map[string]string{"branchId": b})
}

// TestWatchBranchShutdown: server shutdown ends open watch streams at once with UNAVAILABLE, reason
// SERVER_SHUTTING_DOWN, and each stream's cursor, so GracefulStop completes inside the grace period
// (issue 5; docs/development.md#style-lifecycle).
func TestWatchBranchShutdown(t *testing.T) {
	f := newWatchFixture(t, nil)
	b := f.create(t, nil)
	f.instruction(t, b, "x")
	var recs []*watchStream
	var streams []historyv1.HistoryService_WatchBranchClient
	for range 20 {
		s, rec := openWatch(testContext(t), t, f.c, &historyv1.WatchBranchRequest{BranchId: b, AfterSequence: u64(0)})
		recvUntil(s, rec, through(2))
		streams, recs = append(streams, s), append(recs, rec)
	}
	if err := f.ts.Shutdown(testContext(t)); err != nil {
		t.Errorf("Shutdown = %v, want a graceful stop", err)
	}
	var sessions []watchSession
	for i, s := range streams {
		recvUntil(s, recs[i], nil)
		// The cursor is never ahead of what the client received (it moves once a frame's send has
		// returned), but it may trail the last frame: grpc-go can deliver a frame before its
		// SendMsg returns, and shutdown does not wait for a send in flight. So it is 1 or 2 here,
		// and a client resumes from its own last received sequence (history_watch.go "delivered").
		md := errorInfoOf(recs[i].end).GetMetadata()
		last := md["lastSequence"]
		if last != "1" && last != "2" {
			t.Errorf("watcher %d: lastSequence %q, want 2 (received) or 1 (its send in flight at shutdown)", i, last)
		}
		checkStatus(t, recs[i].end, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN,
			map[string]string{"branchId": b, "lastSequence": last})
		sessions = append(sessions, watchSession{recs[i]})
	}
	mustValid(t, sessions...)
}

// TestWatchBranchStreamLimit: past the limit of open watch streams, WatchBranch is
// RESOURCE_EXHAUSTED, reason TOO_MANY_STREAMS; an ended stream frees its place.
func TestWatchBranchStreamLimit(t *testing.T) {
	f := newWatchFixture(t, []store.Option{store.WithMaxSubscriptions(2)})
	b := f.create(t, nil)
	ctx := testContext(t)
	_, _ = openWatch(ctx, t, f.c, &historyv1.WatchBranchRequest{BranchId: b})
	cancelCtx, cancel := contextWithCancel(t)
	second, rec := openWatch(cancelCtx, t, f.c, &historyv1.WatchBranchRequest{BranchId: b})
	// issue 11 review: the refusal gives the figures and the flag, in the metadata and the text.
	err := startErr(t, f.c, &historyv1.WatchBranchRequest{BranchId: b})
	checkStatus(t, err, codes.ResourceExhausted,
		historyv1.ErrorReason_ERROR_REASON_TOO_MANY_STREAMS, map[string]string{"branchId": b, "openStreams": "2", "maxStreams": "2", "flag": "--watch-max-streams"})
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "--watch-max-streams") || !strings.Contains(msg, "2 subscriptions are open, the limit is 2") {
		t.Errorf("message %q does not give the figures and the flag", msg)
	}
	cancel()
	recvUntil(second, rec, nil)
	for err := wait(t, f.ended); !errors.Is(err, context.Canceled); err = wait(t, f.ended) {
	} // the cancelled stream's handler has returned and closed its subscription
	_, third := openWatch(ctx, t, f.c, &historyv1.WatchBranchRequest{BranchId: b})
	mustValid(t, watchSession{rec}, watchSession{third})
}
