package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// gatedStore is a store that is no store.Pipeliner (so AppendMessages orders its items on lanes),
// whose AddMessage waits for gate when gate is set, and which counts the writes running at once.
type gatedStore struct {
	store.Store
	gate    chan struct{}
	started chan struct{} // told of each AddMessage that starts (when set)

	mu               sync.Mutex
	running, maxSeen int
}

func (g *gatedStore) AddMessage(ctx context.Context, b uuid.UUID, in store.AddInput, o store.WriteOptions) (store.WriteResult, error) {
	g.mu.Lock()
	g.running++
	g.maxSeen = max(g.maxSeen, g.running)
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	if g.started != nil {
		g.started <- struct{}{}
	}
	if g.gate != nil {
		select {
		case <-g.gate:
		case <-ctx.Done():
			return store.WriteResult{}, ctx.Err()
		}
	}
	return g.Store.AddMessage(ctx, b, in, o)
}

// newAppendFixture is a history fixture over st (a memory store unless given), served as
// newHistoryFixture serves it.
func newAppendFixture(t *testing.T, st store.Store, opts ...Option) *historyFixture {
	t.Helper()
	mem := store.NewMemory()
	if st == nil {
		st = mem
	}
	ts := newTestServer(t, func(gs *grpc.Server) {
		historyv1.RegisterHistoryServiceServer(gs, NewHistoryServer(st, zap.NewNop()))
	}, opts...)
	return &historyFixture{st: mem, c: historyv1.NewHistoryServiceClient(ts.conn), ts: ts}
}

// pipeline sends every request on one AppendMessages stream (window first) before reading any
// answer, then reads the answers; it fails the test unless the stream ends OK after them.
func pipeline(t *testing.T, c historyv1.HistoryServiceClient, window uint32, reqs []*historyv1.AddMessageRequest) []*historyv1.AppendMessagesResponse {
	t.Helper()
	out, err := pipelineErr(testContext(t), c, window, reqs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// pipelineResult is what pipelineErr returned, for a test that runs it on a goroutine of its own
// (which must not call t.Fatal).
type pipelineResult struct {
	out []*historyv1.AppendMessagesResponse
	err error
}

// pipelineErr is pipeline's work, returning its failure.
func pipelineErr(ctx context.Context, c historyv1.HistoryServiceClient, window uint32, reqs []*historyv1.AddMessageRequest) ([]*historyv1.AppendMessagesResponse, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.AppendMessages(ctx)
	if err != nil {
		return nil, err
	}
	sent := make(chan error, 1)
	go func() { // the client's own sender: it blocks in flow control while the window is full
		err := stream.Send(&historyv1.AppendMessagesRequest{Window: window})
		for _, r := range reqs {
			if err != nil {
				break
			}
			err = stream.Send(&historyv1.AppendMessagesRequest{Item: r})
		}
		if err == nil {
			err = stream.CloseSend()
		}
		sent <- err
	}()
	var out []*historyv1.AppendMessagesResponse
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			cancel()
			<-sent
			return nil, fmt.Errorf("AppendMessages ended with %v after %d answers", err, len(out))
		}
		out = append(out, resp)
	}
	if err := <-sent; err != nil {
		return nil, fmt.Errorf("sending: %v", err)
	}
	if len(out) != len(reqs) {
		return nil, fmt.Errorf("%d answers to %d items", len(out), len(reqs))
	}
	for i, r := range out {
		if r.GetIndex() != uint64(i) {
			return nil, fmt.Errorf("answer %d has index %d: answers must come in the order sent", i, r.GetIndex())
		}
	}
	return out, nil
}

func instructionReq(branch, text string) *historyv1.AddMessageRequest {
	return &historyv1.AddMessageRequest{BranchId: branch, Input: &historyv1.AddMessageRequest_Instruction{
		Instruction: &historyv1.InstructionInput{InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: text}}}}
}

// TestAppendOrderPerBranch: issue 21 "items on one branch apply in the order sent": 64 items on one
// branch, interleaved with items on a second, sent without waiting, land in the order sent, on the
// memory engine (a Pipeliner) and on a store that is not (lanes).
func TestAppendOrderPerBranch(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   func() store.Store
	}{
		{"pipeliner", func() store.Store { return nil }},
		{"lanes", func() store.Store { return &gatedStore{Store: store.NewMemory()} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newAppendFixture(t, tc.st())
			a, b := f.create(t, nil), f.create(t, nil)
			var reqs []*historyv1.AddMessageRequest
			var wantA, wantB []string
			for i := range 64 {
				reqs = append(reqs, instructionReq(a, fmt.Sprint("a", i)))
				wantA = append(wantA, fmt.Sprint("a", i))
				if i%4 == 0 {
					reqs = append(reqs, instructionReq(b, fmt.Sprint("b", i)))
					wantB = append(wantB, fmt.Sprint("b", i))
				}
			}
			out := pipeline(t, f.c, 64, reqs)
			var heads []uint64
			for i, r := range out {
				if r.GetError() != nil {
					t.Fatalf("item %d failed: %v", i, r.GetError())
				}
				if reqs[i].GetBranchId() == a {
					heads = append(heads, r.GetResponse().GetHeadSequence())
				}
			}
			for i, h := range heads {
				if h != uint64(i+2) { // BRANCH_CREATED is 1
					t.Fatalf("item %d on branch a has head %d, want %d: %v", i, h, i+2, heads)
				}
			}
			for branch, want := range map[string][]string{a: wantA, b: wantB} {
				resp, err := f.c.ToChatMessages(testContext(t), &historyv1.ToChatMessagesRequest{BranchId: branch})
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, m := range resp.GetMessages() {
					got = append(got, strings.TrimPrefix(m.GetText(), "Instruction: "))
				}
				if strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("branch order %v, want %v", got, want)
				}
			}
		})
	}
}

// appendCases are the store's AddMessage cases (storetest: history.go, kinds.go, sequences.go,
// idempotency.go, issue13.go) as requests on fixed ids, so that two servers get the same requests:
// each is sent in order, unary on one server and pipelined on another, and must be answered the
// same.
func appendCases(branch, other string) []*historyv1.AddMessageRequest {
	m1, m2, m3, missing := "11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222", "33333333-3333-4333-8333-333333333333", uuid.NewString()
	ins := func(text, requestID string) *historyv1.AddMessageRequest {
		r := instructionReq(branch, text)
		r.RequestId = requestID
		return r
	}
	omit := func(r *historyv1.AddMessageRequest) *historyv1.AddMessageRequest {
		r.OmitContent = true
		return r
	}
	head := func(r *historyv1.AddMessageRequest, h uint64) *historyv1.AddMessageRequest {
		r.ExpectedHeadSequence = &h
		return r
	}
	badFormat := func(r *historyv1.AddMessageRequest) *historyv1.AddMessageRequest {
		r.GetInstruction().ResponseFormatJson = new(`"not an object"`)
		return r
	}
	prebuilt := func(id string, content *historyv1.Message) *historyv1.AddMessageRequest {
		content.Id = id
		return &historyv1.AddMessageRequest{BranchId: branch, Input: &historyv1.AddMessageRequest_Message{Message: content}}
	}
	return []*historyv1.AddMessageRequest{
		ins("one", "r1"),                     // idempotency.go: the first write
		ins("other", "r1"),                   // a repeat with another payload: the first response
		head(ins("x", "r1"), 1),              // sequences.go: a repeat with a stale head: still the first response
		head(ins("x", ""), 99),               // issue13.go: a head ahead: SEQUENCE_MISMATCH
		head(ins("at head", ""), 2),          // the head the previous items leave: written
		instructionReq("junk", "x"),          // the branch id is no UUID: INVALID_FIELD
		instructionReq(uuid.NewString(), ""), // history.go: an unknown branch: BRANCH_NOT_FOUND
		{BranchId: branch, TargetId: missing, Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
			GuidanceValue: &historyv1.InstructionInput_Guidance{Guidance: "g"}}}}, // a missing target: MESSAGE_NOT_FOUND
		badFormat(ins("x", "")),     // sequences.go: a bad response format: INVALID_FIELD, nothing written
		instructionReq(other, "r1"), // sequences.go: the same request id on another branch: a new write
		prebuilt(m1, &historyv1.Message{Content: &historyv1.Message_Instruction{Instruction: &historyv1.InstructionContent{}}}),
		{BranchId: branch, Input: &historyv1.AddMessageRequest_ActionOutput{ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: m1}}},     // kinds.go: not an ActionRequest
		prebuilt(m1, &historyv1.Message{Content: &historyv1.Message_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseContent{}}}), // history.go: a kind change
		prebuilt(m2, &historyv1.Message{Content: &historyv1.Message_ActionRequest{ActionRequest: &historyv1.ActionRequestContent{Function: "f"}}}),
		{BranchId: branch, Input: &historyv1.AddMessageRequest_ActionOutput{ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: m2, OutputJson: new("1")}}}, // history.go: answers m2, updated_request set
		badFormat(ins("y", "r2")),       // an invalid item with a new request id: INVALID_FIELD
		ins("three", "r3"),              // written ...
		badFormat(ins("invalid", "r3")), // ... so a repeat of r3, invalid as it is, gets r3's response
		{BranchId: branch, Input: &historyv1.AddMessageRequest_System{System: &historyv1.SystemInput{SystemMessage: new("sys")}}}, // a System at index 0
		{BranchId: branch, IncludeRendered: true, Metadata: &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewStringValue("v")}},
			Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: "rendered"}}}},
		omit(ins("acknowledged", "")),         // omit_content: the message less its content
		omit(ins("x", "r1")),                  // a repeat answered as it asks: r1's first response less its content
		omit(badFormat(ins("invalid", "r3"))), // an invalid repeat of r3 (answered after the earlier items): r3's response less its content
		prebuilt(m3, &historyv1.Message{Content: &historyv1.Message_ActionRequest{ActionRequest: &historyv1.ActionRequestContent{Function: "g"}}}),
		omit(&historyv1.AddMessageRequest{BranchId: branch, Input: &historyv1.AddMessageRequest_ActionOutput{ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: m3}}}), // updated_request less its content too
		{BranchId: branch, OmitContent: true, IncludeRendered: true, Input: instructionInput("both")},                                                                           // INVALID_FIELD omit_content
	}
}

// TestAppendConformanceStoreCases: issue 21 Acceptance over the store's AddMessage cases, and
// "a failed item fails alone, the stream goes on": unary one after another on one server, all
// pipelined in one stream on another (window 8), on the memory engine and on lanes, answered the
// same.
func TestAppendConformanceStoreCases(t *testing.T) {
	branch, other := uuid.NewString(), uuid.NewString()
	setup := func(f *historyFixture) {
		f.create(t, &historyv1.CreateBranchRequest{BranchId: branch})
		f.create(t, &historyv1.CreateBranchRequest{BranchId: other})
	}
	unary := newAppendFixture(t, nil)
	setup(unary)
	var want []string
	for _, r := range appendCases(branch, other) {
		resp, err := unary.c.AddMessage(testContext(t), r)
		want = append(want, answerText(resp, err))
	}
	want = normalizeAnswers(want)
	failed := 0
	for _, w := range want {
		if strings.HasPrefix(w, "error") {
			failed++
		}
	}
	if failed < 8 || failed == len(want) {
		t.Fatalf("%d of %d cases failed unary; the table is meant to mix both", failed, len(want))
	}
	for _, tc := range []struct {
		name string
		st   store.Store
	}{{"pipeliner", nil}, {"lanes", &gatedStore{Store: store.NewMemory()}}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newAppendFixture(t, tc.st)
			setup(f)
			var got []string
			for _, r := range pipeline(t, f.c, 8, appendCases(branch, other)) {
				got = append(got, answerText(itemAnswer(r)))
			}
			got = normalizeAnswers(got)
			for i := range want {
				if got[i] != want[i] {
					t.Errorf("case %d:\n stream %s\n unary  %s", i, got[i], want[i])
				}
			}
		})
	}
}

// holdOne holds the writes to one branch until gate is closed, and tells wrote of every write to
// the others once it is done.
type holdOne struct {
	store.Store
	held  uuid.UUID
	gate  chan struct{}
	wrote chan struct{}
}

func (h *holdOne) AddMessage(ctx context.Context, b uuid.UUID, in store.AddInput, o store.WriteOptions) (store.WriteResult, error) {
	if b == h.held {
		select {
		case <-h.gate:
		case <-ctx.Done():
			return store.WriteResult{}, ctx.Err()
		}
	}
	res, err := h.Store.AddMessage(ctx, b, in, o)
	if b != h.held {
		h.wrote <- struct{}{}
	}
	return res, err
}

// An invalid item is answered from the record of its request id only when an earlier item of the
// stream made it: not when a later item with the same request id was written before the invalid
// one was answered (the unary calls, one after another, answer INVALID_ARGUMENT and then write),
// nor when the earlier item with it was refused. A first item on another branch, held, keeps the
// invalid one unanswered while the later one is written (a review found it answered OK with the
// later item's message).
func TestAppendInvalidItemNotAnsweredByALaterOne(t *testing.T) {
	ahead := uint64(999)
	for _, tc := range []struct {
		name   string
		refuse bool // an earlier item with the request id, refused, before the invalid one
	}{{"a later item", false}, {"a refused earlier item and a later one", true}} {
		t.Run(tc.name, func(t *testing.T) {
			held, branch := uuid.New(), uuid.NewString()
			st := &holdOne{Store: store.NewMemory(), held: held, gate: make(chan struct{}), wrote: make(chan struct{}, 4)}
			f := newAppendFixture(t, st)
			f.create(t, &historyv1.CreateBranchRequest{BranchId: held.String()})
			f.create(t, &historyv1.CreateBranchRequest{BranchId: branch})
			item := func(text string, bad bool, head *uint64) *historyv1.AddMessageRequest {
				r := instructionReq(branch, text)
				r.RequestId, r.ExpectedHeadSequence = "x", head
				if bad { // refused by the conversion, before the store: omit_content with include_rendered
					r.OmitContent, r.IncludeRendered = true, true
				}
				return r
			}
			reqs := []*historyv1.AddMessageRequest{instructionReq(held.String(), "held")}
			if tc.refuse {
				reqs = append(reqs, item("refused", false, &ahead))
			}
			invalid := len(reqs)
			reqs = append(reqs, item("invalid", true, nil), item("valid", false, nil))
			got := make(chan []*historyv1.AppendMessagesResponse, 1)
			go func() { got <- pipeline(t, f.c, 8, reqs) }()
			for range len(reqs) - 2 { // the writes to branch: the later one, and the refused one
				select {
				case <-st.wrote:
				case <-time.After(time.Minute):
					t.Fatal("the items on the branch not held were not written")
				}
			}
			close(st.gate)
			answers := <-got
			if _, err := itemAnswer(answers[invalid]); status.Code(err) != codes.InvalidArgument {
				t.Fatalf("the invalid item: %v, want INVALID_ARGUMENT", err)
			}
			if resp, err := itemAnswer(answers[invalid+1]); err != nil || resp.GetMessage().GetId() == "" {
				t.Fatalf("the later item: %v, %v; want it written", resp, err)
			}
		})
	}
}

// An earlier item answered with an error that leaves its outcome open (UNAVAILABLE "may or may not
// have been applied") may have written its request id's record, so an invalid item after it
// looks for the record, as the unary call after it would; a refusal of the request itself wrote
// nothing.
func TestAppendMayHaveWritten(t *testing.T) {
	for code, want := range map[codes.Code]bool{
		codes.OK: true, codes.Unavailable: true, codes.Internal: true, codes.DeadlineExceeded: true, codes.Unknown: true,
		codes.InvalidArgument: false, codes.NotFound: false, codes.FailedPrecondition: false, codes.ResourceExhausted: false,
	} {
		a := &historyv1.AppendMessagesResponse{}
		if code != codes.OK {
			a.Result = &historyv1.AppendMessagesResponse_Error{Error: &historyv1.ItemStatus{Code: int32(code)}}
		}
		if got := mayHaveWritten(a); got != want {
			t.Errorf("%v: %v, want %v", code, got, want)
		}
	}
}

// answerText is an AddMessage answer as the transcripts of the conformance tests write it.
func answerText(resp *historyv1.AddMessageResponse, err error) string {
	tr := &addTranscript{}
	_ = tr.interceptor(context.Background(), historyv1.HistoryService_AddMessage_FullMethodName, nil, resp, nil,
		func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return err })
	return tr.answers[0]
}

// TestAppendWindowBoundsInFlight: issue 21 "flow control bounds how many are in flight (a window the
// client sets, capped by the server)": with writes held, a stream with window 3 over 8 branches has
// exactly 3 writes running (items on different branches run at once), never more.
func TestAppendWindowBoundsInFlight(t *testing.T) {
	for _, tc := range []struct {
		name       string
		window     uint32
		serverCap  int
		wantRuning int
	}{{"client window", 3, 0, 3}, {"server cap", 0, 2, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			g := &gatedStore{Store: store.NewMemory(), gate: make(chan struct{}), started: make(chan struct{}, 16)}
			ts := newTestServer(t, func(gs *grpc.Server) {
				hs := NewHistoryServer(g, zap.NewNop())
				if tc.serverCap > 0 {
					hs.maxAppendWindow = tc.serverCap // what RegisterHistory sets from Limits.MaxAppendWindow
				}
				historyv1.RegisterHistoryServiceServer(gs, hs)
			})
			c := historyv1.NewHistoryServiceClient(ts.conn)
			var reqs []*historyv1.AddMessageRequest
			for range 8 {
				resp, err := c.CreateBranch(testContext(t), &historyv1.CreateBranchRequest{})
				if err != nil {
					t.Fatal(err)
				}
				reqs = append(reqs, instructionReq(resp.GetBranch().GetId(), "x"))
			}
			done := make(chan pipelineResult, 1)
			go func() {
				out, err := pipelineErr(testContext(t), c, tc.window, reqs)
				done <- pipelineResult{out, err}
			}()
			for range tc.wantRuning {
				<-g.started
			}
			// The window is full: release the writes one at a time; each release lets exactly one
			// more item in, so the count never passes the window.
			for range 8 {
				g.gate <- struct{}{}
			}
			res := <-done
			if res.err != nil {
				t.Fatal(res.err)
			}
			for i, r := range res.out {
				if r.GetError() != nil {
					t.Fatalf("item %d: %v", i, r.GetError())
				}
			}
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.maxSeen != tc.wantRuning {
				t.Errorf("%d writes ran at once, want %d (the window)", g.maxSeen, tc.wantRuning)
			}
		})
	}
}

// TestAppendInflightBudget: issue 21 "the in-flight items' bytes count against the existing
// in-flight budgets": an item that does not fit beside the ones held fails alone,
// RESOURCE_EXHAUSTED INFLIGHT_BUDGET_EXCEEDED, and the stream goes on; all is given back at the end.
func TestAppendInflightBudget(t *testing.T) {
	const per = 64 << 10
	g := &gatedStore{Store: store.NewMemory(), gate: make(chan struct{}), started: make(chan struct{}, 4)}
	l := DefaultLimits()
	l.MaxRecvMsgSize, l.MaxInflightBytes = per, per+100<<10
	ts := newTestServer(t, func(gs *grpc.Server) {
		historyv1.RegisterHistoryServiceServer(gs, NewHistoryServer(g, zap.NewNop()))
	}, WithLimits(l))
	c := historyv1.NewHistoryServiceClient(ts.conn)
	resp, err := c.CreateBranch(testContext(t), &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b := resp.GetBranch().GetId()
	big := strings.Repeat("x", 60<<10)
	reqs := []*historyv1.AddMessageRequest{instructionReq(b, big), instructionReq(b, big), instructionReq(b, "small")}
	// The unary calls' reservations are given back when their contexts end, just after they return.
	eventually(t, "CreateBranch's reservation given back", func() bool { return ts.tap.budget.reserved() == 0 })
	done := make(chan pipelineResult, 1)
	go func() {
		out, err := pipelineErr(testContext(t), c, 4, reqs)
		done <- pipelineResult{out, err}
	}()
	<-g.started // the first item holds its 60 KiB; the second cannot fit beside it
	// The third item is taken once the stream holds its message's share, the first item and the
	// third (the second, refused, holds nothing).
	held := int64(per + proto.Size(reqs[0]) + proto.Size(reqs[2]))
	eventually(t, "the third item taken", func() bool { return ts.tap.budget.reserved() == held })
	g.gate <- struct{}{}
	<-g.started
	g.gate <- struct{}{}
	res := <-done
	if res.err != nil {
		t.Fatal(res.err)
	}
	out := res.out
	if out[0].GetError() != nil || out[2].GetError() != nil {
		t.Fatalf("items 0 and 2: %v, %v; want written", out[0].GetError(), out[2].GetError())
	}
	_, err = itemAnswer(out[1])
	ei := wantStatusInfo(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_INFLIGHT_BUDGET_EXCEEDED)
	if md := ei.GetMetadata(); md["flag"] != "--max-inflight-bytes" || md["heldBytes"] == "" {
		t.Errorf("metadata %v, want the figures", md)
	}
	eventually(t, "the stream's reservation given back", func() bool { return ts.tap.budget.reserved() == 0 })
}

// TestAppendEndsAtShutdown: like the watch streams, an AppendMessages stream ends at shutdown with
// UNAVAILABLE SERVER_SHUTTING_DOWN once the items it took are answered, so GracefulStop need not
// wait for a client that keeps its stream open.
func TestAppendEndsAtShutdown(t *testing.T) {
	hs := NewHistoryServer(store.NewMemory(), zap.NewNop())
	ts := newTestServer(t, func(gs *grpc.Server) { historyv1.RegisterHistoryServiceServer(gs, hs) })
	c := historyv1.NewHistoryServiceClient(ts.conn)
	resp, err := c.CreateBranch(testContext(t), &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	stream, err := c.AppendMessages(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&historyv1.AppendMessagesRequest{Item: instructionReq(resp.GetBranch().GetId(), "x")}); err != nil {
		t.Fatal(err)
	}
	if r, err := stream.Recv(); err != nil || r.GetResponse() == nil {
		t.Fatalf("first answer: %v, %v", r, err)
	}
	hs.EndStreams()
	_, err = stream.Recv()
	wantStatusInfo(t, err, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_SERVER_SHUTTING_DOWN)
}

// TestItemStatusIsGoogleRPCStatus: the proto says ItemStatus's bytes decode as a google.rpc.Status.
func TestItemStatusIsGoogleRPCStatus(t *testing.T) {
	f := newAppendFixture(t, nil)
	out := pipeline(t, f.c, 1, []*historyv1.AddMessageRequest{instructionReq(uuid.NewString(), "x")})
	_, err := itemAnswer(out[0])
	wantStatusInfo(t, err, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND)
	b, err := proto.Marshal(out[0].GetError())
	if err != nil {
		t.Fatal(err)
	}
	var st spb.Status
	if err := proto.Unmarshal(b, &st); err != nil {
		t.Fatalf("ItemStatus's bytes as a google.rpc.Status: %v", err)
	}
	wantStatusInfo(t, status.FromProto(&st).Err(), codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND)
}
