package server

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// historyFixture is a HistoryService over a memory store, served over bufconn with the production
// interceptor chain.
type historyFixture struct {
	st   *store.Memory
	c    historyv1.HistoryServiceClient
	ts   *testServer
	logs *observer.ObservedLogs // the HistoryServer's own log
}

func newHistoryFixture(t *testing.T, opts ...store.Option) *historyFixture {
	t.Helper()
	st := store.NewMemory(opts...)
	core, logs := observer.New(zapcore.DebugLevel)
	ts := newTestServer(t, func(gs *grpc.Server) {
		historyv1.RegisterHistoryServiceServer(gs, NewHistoryServer(st, zap.New(core)))
	})
	return &historyFixture{st: st, c: historyv1.NewHistoryServiceClient(ts.conn), ts: ts, logs: logs}
}

// create creates a branch and returns its id.
func (f *historyFixture) create(t *testing.T, req *historyv1.CreateBranchRequest) string {
	t.Helper()
	if req == nil {
		req = &historyv1.CreateBranchRequest{}
	}
	resp, err := f.c.CreateBranch(testContext(t), req)
	if err != nil {
		t.Fatalf("CreateBranch: %v", err)
	}
	return resp.GetBranch().GetId()
}

// add sends an AddMessage and fails the test on error.
func (f *historyFixture) add(t *testing.T, req *historyv1.AddMessageRequest) *historyv1.AddMessageResponse {
	t.Helper()
	resp, err := f.c.AddMessage(testContext(t), req)
	if err != nil {
		t.Fatalf("AddMessage(%v): %v", req, err)
	}
	return resp
}

// instruction adds add_message(instruction=text).
func (f *historyFixture) instruction(t *testing.T, branch, text string) *historyv1.Message {
	t.Helper()
	return f.add(t, &historyv1.AddMessageRequest{BranchId: branch, IncludeRendered: true, Input: &historyv1.AddMessageRequest_Instruction{
		Instruction: &historyv1.InstructionInput{InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: text}},
	}}).GetMessage()
}

// ids lists the branch's message ids in order.
func (f *historyFixture) ids(t *testing.T, branch string, req *historyv1.ListMessagesRequest) []string {
	t.Helper()
	if req == nil {
		req = &historyv1.ListMessagesRequest{}
	}
	req.BranchId = branch
	var out []string
	for {
		resp, err := f.c.ListMessages(testContext(t), req)
		if err != nil {
			t.Fatalf("ListMessages: %v", err)
		}
		for _, m := range resp.GetMessages() {
			out = append(out, m.GetId())
		}
		if resp.GetNextPageToken() == "" {
			return out
		}
		req.PageToken = resp.GetNextPageToken()
	}
}

// export returns the branch's JSON-mode export text.
func (f *historyFixture) export(t *testing.T, branch string) string {
	t.Helper()
	resp, err := f.c.ExportBranch(testContext(t), &historyv1.ExportBranchRequest{BranchId: branch})
	if err != nil {
		t.Fatalf("ExportBranch: %v", err)
	}
	return resp.GetData()
}

// head returns the branch's head sequence.
func (f *historyFixture) head(t *testing.T, branch string) uint64 {
	t.Helper()
	resp, err := f.c.GetBranch(testContext(t), &historyv1.GetBranchRequest{BranchId: branch})
	if err != nil {
		t.Fatalf("GetBranch: %v", err)
	}
	return resp.GetBranch().GetHeadSequence()
}

// wantStatus checks an error's code and ErrorInfo reason and returns the ErrorInfo (and the
// BadRequest field, when there is one).
func wantStatus(t *testing.T, err error, code codes.Code, reason historyv1.ErrorReason) (*errdetails.ErrorInfo, string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || err == nil {
		t.Fatalf("error %v is not a gRPC status", err)
	}
	if st.Code() != code {
		t.Fatalf("code = %v (%s), want %v", st.Code(), st.Message(), code)
	}
	ei := errorInfoOf(err)
	if ei == nil || ei.GetReason() != reason.String() || ei.GetDomain() != errorDomain {
		t.Fatalf("ErrorInfo = %v, want reason %v (%s)", ei, reason, st.Message())
	}
	field := ""
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok && len(br.GetFieldViolations()) > 0 {
			field = br.GetFieldViolations()[0].GetField()
		}
	}
	return ei, field
}

// wantField checks an INVALID_ARGUMENT naming field.
func wantField(t *testing.T, err error, field string) {
	t.Helper()
	_, got := wantStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
	if got != field {
		t.Errorf("BadRequest field = %q, want %q (%v)", got, field, err)
	}
}

func sval(s string) *structpb.Value { return structpb.NewStringValue(s) }

func u64(v uint64) *uint64 { return &v }

// sameResponse fails the test when two responses differ.
func sameResponse(t *testing.T, what string, a, b proto.Message) {
	t.Helper()
	if !proto.Equal(a, b) {
		t.Errorf("%s differs:\n first  %v\n repeat %v", what, a, b)
	}
}

func instructionInput(text string) *historyv1.AddMessageRequest_Instruction {
	return &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: text},
	}}
}
