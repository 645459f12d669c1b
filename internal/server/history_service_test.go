package server

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// TestHistoryConvertedMessagesFieldCount guards the history converters (docs/development.md#style-proto, etcd's trick):
// a new field breaks this test until history_convert.go, or the handler that converts the request
// by hand, handles it.
func TestHistoryConvertedMessagesFieldCount(t *testing.T) {
	checkFieldCounts(t, "history_*.go", []fieldCount{
		{&historyv1.Branch{}, 12},
		{&historyv1.AddMessageRequest{}, 15},
		{&historyv1.InstructionInput{}, 14},
		{&historyv1.SystemInput{}, 3},
		{&historyv1.AssistantResponseInput{}, 2},
		{&historyv1.ActionRequestInput{}, 2},
		{&historyv1.ActionOutputInput{}, 3},
		{&historyv1.CreateBranchRequest{}, 7},
		{&historyv1.CreateActionResponseRequest{}, 9},
		{&historyv1.ListMessagesRequest{}, 7},
		{&historyv1.ForkBranchRequest{}, 6},
		{&historyv1.ImportBranchRequest{}, 5},
		{&historyv1.ToChatMessagesResponse{}, 5},
		// The requests converted by hand in their handlers (history_service.go, history_messages.go).
		{&historyv1.GetBranchRequest{}, 1},
		{&historyv1.ListBranchesRequest{}, 2},
		{&historyv1.DeleteBranchRequest{}, 3},
		{&historyv1.ExportBranchRequest{}, 3},
		{&historyv1.SetSystemRequest{}, 5},
		{&historyv1.GetMessageRequest{}, 3},
		{&historyv1.GetLastMessageRequest{}, 3},
		{&historyv1.ExportBranchStreamRequest{}, 3},
		{&historyv1.ImportBranchStreamRequest{}, 5},
		{&historyv1.ToChatMessagesRequest{}, 4},
		{&historyv1.ClearMessagesRequest{}, 3},
		{&historyv1.SetProgressionRequest{}, 4},
	})
}

// TestHistoryCreateGetListDelete: CreateBranch (Branch(system=, user=): the System's sender is the
// user, its recipient the branch — vector "Branch(system, user)"), GetBranch, ListBranches pages,
// DeleteBranch; an existing id is ALREADY_EXISTS, an unknown one NOT_FOUND (issue 4 "Bad input").
func TestHistoryCreateGetListDelete(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	id := uuid.NewString()
	meta, _ := structpb.NewStruct(map[string]any{"team": "x"})
	resp, err := f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{
		BranchId: id, Name: strPtr("main"), User: strPtr("alice"), Metadata: meta,
		System: &historyv1.SystemInput{SystemMessage: strPtr("You are S")},
	})
	if err != nil {
		t.Fatal(err)
	}
	b := resp.GetBranch()
	if b.GetId() != id || b.GetName() != "main" || b.GetUser() != "alice" || b.GetHeadSequence() != 1 || b.GetMessageCount() != 1 ||
		b.GetIncarnation() == "" || b.GetSystemId() != resp.GetSystem().GetId() || b.GetMetadata().GetFields()["team"].GetStringValue() != "x" {
		t.Errorf("branch = %v", b)
	}
	sys := resp.GetSystem()
	if sys.GetSender().GetStringValue() != "alice" || sys.GetRecipient().GetStringValue() != id || sys.GetRendered().GetText() != "You are S" || sys.GetSequence() != 1 {
		t.Errorf("system = %v", sys)
	}
	got, err := f.c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: strings.ToUpper(id)})
	if err != nil || got.GetBranch().GetId() != id {
		t.Errorf("GetBranch (upper-case id) = %v, %v", got, err)
	}
	_, err = f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{BranchId: id})
	ei, _ := wantStatus(t, err, codes.AlreadyExists, historyv1.ErrorReason_ERROR_REASON_BRANCH_ALREADY_EXISTS)
	if ei.GetMetadata()["branchId"] != id {
		t.Errorf("metadata = %v", ei.GetMetadata())
	}
	missing := uuid.NewString()
	_, err = f.c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: missing})
	ei, _ = wantStatus(t, err, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND)
	if ei.GetMetadata()["branchId"] != missing {
		t.Errorf("metadata = %v", ei.GetMetadata())
	}

	for range 4 {
		f.create(t, nil)
	}
	seen := map[string]bool{}
	token := ""
	for {
		page, err := f.c.ListBranches(ctx, &historyv1.ListBranchesRequest{PageSize: 2, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range page.GetBranches() {
			seen[b.GetId()] = true
		}
		if token = page.GetNextPageToken(); token == "" {
			break
		}
	}
	if len(seen) != 5 {
		t.Errorf("ListBranches saw %d branches, want 5", len(seen))
	}
	_, err = f.c.ListBranches(ctx, &historyv1.ListBranchesRequest{PageSize: -1})
	wantField(t, err, "page_size")

	del, err := f.c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: id})
	if err != nil || del.GetBranchId() != id || del.GetLastSequence() != 2 {
		t.Errorf("DeleteBranch = %v, %v", del, err)
	}
	_, err = f.c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: id})
	wantStatus(t, err, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND)
}

func strPtr(s string) *string { return &s }

// TestHistoryBadInput: issue 4 "Bad input": malformed ids, a kind change, an action output for a
// message that is not an action request, a negative page size, non-member ids in an order or a
// progression (D3's text), unknown branches and messages — each with its code and reason, the
// field an input error names (or none), and the branch unchanged.
func TestHistoryBadInput(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	created, err := f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{System: &historyv1.SystemInput{SystemMessage: strPtr("S")}})
	if err != nil {
		t.Fatal(err)
	}
	b, sys := created.GetBranch().GetId(), created.GetSystem().GetId()
	ins := f.instruction(t, b, "hello")
	asst := f.add(t, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_AssistantResponse{
		AssistantResponse: &historyv1.AssistantResponseInput{Response: &historyv1.AssistantResponseInput_Text{Text: "hi"}}}}).GetMessage()
	guidance := &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{GuidanceValue: &historyv1.InstructionInput_Guidance{Guidance: "G"}}}
	stranger := uuid.NewString()
	before := f.export(t, b)
	for _, tc := range []struct {
		name   string
		call   func() error
		code   codes.Code
		reason historyv1.ErrorReason
		field  string
	}{
		{"malformed branch id", func() error {
			_, err := f.c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: "nope"})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "branch_id"},
		{"missing branch id", func() error {
			_, err := f.c.ListMessages(ctx, &historyv1.ListMessagesRequest{})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "branch_id"},
		{"malformed message id", func() error {
			_, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: "x"})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "message_id"},
		{"malformed order id", func() error {
			_, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Order: &historyv1.MessageIds{Ids: []string{ins.GetId(), "x"}}})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "order.ids[1]"},
		{"unknown branch", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: stranger, Input: instructionInput("x")})
			return err
		}, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND, ""},
		{"unknown message", func() error {
			_, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: stranger})
			return err
		}, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_MESSAGE_NOT_FOUND, ""},
		{"unknown target", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, TargetId: stranger, Input: &historyv1.AddMessageRequest_Instruction{
				Instruction: &historyv1.InstructionInput{GuidanceValue: &historyv1.InstructionInput_Guidance{Guidance: "g"}}}})
			return err
		}, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_MESSAGE_NOT_FOUND, ""},
		{"order names a stranger", func() error {
			_, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Order: &historyv1.MessageIds{Ids: []string{stranger}}})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_PROGRESSION, "order.ids[0]"},
		{"progression names a stranger", func() error {
			_, err := f.c.SetProgression(ctx, &historyv1.SetProgressionRequest{BranchId: b, Progression: &historyv1.MessageIds{Ids: []string{ins.GetId(), stranger}}})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_PROGRESSION, "progression.ids[1]"},
		{"progression repeats an id", func() error {
			_, err := f.c.SetProgression(ctx, &historyv1.SetProgressionRequest{BranchId: b, Progression: &historyv1.MessageIds{Ids: []string{ins.GetId(), ins.GetId()}}})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_PROGRESSION, "progression.ids[1]"},
		{"kind change", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Message{Message: &historyv1.Message{
				Id: ins.GetId(), Content: &historyv1.Message_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseContent{AssistantResponse: "x"}}}}})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_MESSAGE_KIND_CHANGE, "message"},
		// review M2: a target keeps its kind; an input of another kind is not silently ignored.
		{"instruction input for an AssistantResponse target", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, TargetId: asst.GetId(), Input: guidance})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_MESSAGE_KIND_CHANGE, "target_id"},
		{"instruction input for the system target", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, TargetId: sys, Input: guidance})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_MESSAGE_KIND_CHANGE, "target_id"},
		{"an empty system input for an Instruction target", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, TargetId: ins.GetId(), Sender: structpb.NewStringValue("bob"),
				Input: &historyv1.AddMessageRequest_System{System: &historyv1.SystemInput{}}})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_MESSAGE_KIND_CHANGE, "target_id"},
		{"action output for an instruction", func() error {
			_, err := f.c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: b, ActionRequestId: ins.GetId()})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_NOT_AN_ACTION_REQUEST, "action_request_id"},
		{"action output input for an instruction", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_ActionOutput{
				ActionOutput: &historyv1.ActionOutputInput{ActionRequestId: ins.GetId(), OutputJson: strPtr("1")}}})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_NOT_AN_ACTION_REQUEST, "action_output.action_request_id"},
		{"negative page size", func() error {
			_, err := f.c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: b, PageSize: -1})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "page_size"},
		{"stale page token", func() error {
			_, err := f.c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: b, PageToken: "garbage"})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "page_token"},
		{"no input", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "input"},
		{"bad context JSON", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Instruction{
				Instruction: &historyv1.InstructionInput{ContextJson: []string{`{"a":`}}}})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "instruction.context_json[0]"},
		{"bad context mode", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Instruction{
				Instruction: &historyv1.InstructionInput{ContextJson: []string{`"c"`}, HandleContext: 99}}})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "instruction.handle_context"},
		{"participant not a string", func() error {
			_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Sender: structpb.NewNumberValue(1), Input: instructionInput("x")})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "sender"},
		{"set a non-system", func() error {
			_, err := f.c.SetSystem(ctx, &historyv1.SetSystemRequest{BranchId: b, System: &historyv1.Message{
				Content: &historyv1.Message_Instruction{Instruction: &historyv1.InstructionContent{}}}})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "system"},
		{"view and selected", func() error {
			_, err := f.c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: b, View: historyv1.MessageView_MESSAGE_VIEW_ACTIONS, Selected: true})
			return err
		}, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD, "view"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call()
			ei, field := wantStatus(t, err, tc.code, tc.reason)
			if field != tc.field {
				t.Errorf("field = %q, want %q (%v)", field, tc.field, err)
			}
			switch tc.reason {
			case historyv1.ErrorReason_ERROR_REASON_MESSAGE_NOT_FOUND:
				if ei.GetMetadata()["messageId"] != stranger || ei.GetMetadata()["branchId"] != b {
					t.Errorf("metadata = %v", ei.GetMetadata())
				}
			case historyv1.ErrorReason_ERROR_REASON_INVALID_PROGRESSION:
				if !strings.Contains(err.Error(), store.InvalidProgressionMessage) {
					t.Errorf("message %q lacks D3's text", err)
				}
			}
			if after := f.export(t, b); after != before {
				t.Errorf("a failed request changed the branch")
			}
		})
	}
}

// TestHistoryRequestIDRepeat: docs/design.md#branches (AIP-155): a repeated request_id returns the
// first response and writes nothing, even if the payload differs — or does not even validate; the
// scope is the branch (for DeleteBranch too), or the server for create/import/fork; an id used by
// another method is INVALID_ARGUMENT.
func TestHistoryRequestIDRepeat(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	b := f.create(t, nil)
	first := f.add(t, &historyv1.AddMessageRequest{BranchId: b, RequestId: "r-1", Input: instructionInput("one")})
	before := f.export(t, b)
	for _, repeat := range []*historyv1.AddMessageRequest{
		{BranchId: b, RequestId: "r-1", Input: instructionInput("two")},
		{BranchId: b, RequestId: "r-1", TargetId: "not a uuid", ExpectedHeadSequence: u64(999)},
	} {
		again, err := f.c.AddMessage(ctx, repeat)
		if err != nil {
			t.Fatalf("repeat: %v", err)
		}
		sameResponse(t, "AddMessage", first, again)
	}
	if after := f.export(t, b); after != before {
		t.Error("a repeated request wrote")
	}
	_, err := f.c.ClearMessages(ctx, &historyv1.ClearMessagesRequest{BranchId: b, RequestId: "r-1"})
	wantField(t, err, "request_id")

	c1, err := f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{RequestId: "c-1", Name: strPtr("a")})
	if err != nil {
		t.Fatal(err)
	}
	c2, err := f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{RequestId: "c-1", Name: strPtr("b"), BranchId: "bad"})
	if err != nil {
		t.Fatal(err)
	}
	sameResponse(t, "CreateBranch", c1, c2)

	d1, err := f.c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: c1.GetBranch().GetId(), RequestId: "d-1"})
	if err != nil {
		t.Fatal(err)
	}
	d2, err := f.c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: c1.GetBranch().GetId(), RequestId: "d-1"})
	if err != nil {
		t.Fatalf("repeated delete: %v", err)
	}
	sameResponse(t, "DeleteBranch", d1, d2)
	// A delete's request id is remembered per branch (review MINOR 6): reused on another branch it
	// deletes that one.
	other := f.create(t, nil)
	d3, err := f.c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: other, RequestId: "d-1"})
	if err != nil || d3.GetBranchId() != other {
		t.Fatalf("delete of another branch under a used request id = %v, %v", d3, err)
	}
	_, err = f.c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: other})
	wantStatus(t, err, codes.NotFound, historyv1.ErrorReason_ERROR_REASON_BRANCH_NOT_FOUND)
	// A create's response, its system included, outlives the branch (review B1).
	s1, err := f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{RequestId: "c-2", System: &historyv1.SystemInput{SystemMessage: strPtr("S")}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: s1.GetBranch().GetId()}); err != nil {
		t.Fatal(err)
	}
	s2, err := f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{RequestId: "c-2"})
	if err != nil {
		t.Fatal(err)
	}
	sameResponse(t, "CreateBranch after its delete", s1, s2)

	p1, err := f.c.SetProgression(ctx, &historyv1.SetProgressionRequest{BranchId: b, RequestId: "p-1", Progression: &historyv1.MessageIds{Ids: []string{first.GetMessage().GetId()}}})
	if err != nil {
		t.Fatal(err)
	}
	p2, err := f.c.SetProgression(ctx, &historyv1.SetProgressionRequest{BranchId: b, RequestId: "p-1"})
	if err != nil {
		t.Fatal(err)
	}
	sameResponse(t, "SetProgression", p1, p2)
	if h := f.head(t, b); h != p1.GetHeadSequence() {
		t.Errorf("head %d after a repeated SetProgression, want %d", h, p1.GetHeadSequence())
	}
}

// TestHistoryExpectedHeadMismatch: docs/design.md#optimistic-concurrency: a mismatch is
// FAILED_PRECONDITION, reason SEQUENCE_MISMATCH, with the actual headSequence, and writes nothing.
func TestHistoryExpectedHeadMismatch(t *testing.T) {
	f := newHistoryFixture(t)
	ctx := testContext(t)
	b := f.create(t, nil)
	f.instruction(t, b, "x")
	before := f.export(t, b)
	_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, ExpectedHeadSequence: u64(1), Input: instructionInput("y")})
	ei, _ := wantStatus(t, err, codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_SEQUENCE_MISMATCH)
	if ei.GetMetadata()["headSequence"] != "2" || ei.GetMetadata()["branchId"] != b {
		t.Errorf("metadata = %v, want headSequence 2", ei.GetMetadata())
	}
	if f.export(t, b) != before {
		t.Error("a mismatched write changed the branch")
	}
	for name, call := range map[string]func(*uint64) error{
		"ClearMessages": func(h *uint64) error {
			_, err := f.c.ClearMessages(ctx, &historyv1.ClearMessagesRequest{BranchId: b, ExpectedHeadSequence: h})
			return err
		},
		"DeleteBranch": func(h *uint64) error {
			_, err := f.c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: b, ExpectedHeadSequence: h})
			return err
		},
		"ForkBranch": func(h *uint64) error {
			_, err := f.c.ForkBranch(ctx, &historyv1.ForkBranchRequest{BranchId: b, ExpectedHeadSequence: h})
			return err
		},
	} {
		wantStatus(t, call(u64(7)), codes.FailedPrecondition, historyv1.ErrorReason_ERROR_REASON_SEQUENCE_MISMATCH)
		_ = name
	}
	ok, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, ExpectedHeadSequence: u64(2), Input: instructionInput("y")})
	if err != nil || ok.GetHeadSequence() != 3 {
		t.Errorf("matching head: %v, %v", ok, err)
	}
}

// TestHistoryMemoryBudget: issue 4: a write past the memory budget is RESOURCE_EXHAUSTED (reason
// MEMORY_BUDGET_EXCEEDED) and the branch is unchanged; issue 11: the status carries the figures
// (request, used and budget bytes) and the flag.
func TestHistoryMemoryBudget(t *testing.T) {
	f := newHistoryFixture(t, store.WithMemoryBudget(128<<10))
	ctx := testContext(t)
	b := f.create(t, nil)
	f.instruction(t, b, "small")
	before := f.export(t, b)
	_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: instructionInput(strings.Repeat("x", 256<<10))})
	wantStatus(t, err, codes.ResourceExhausted, historyv1.ErrorReason_ERROR_REASON_MEMORY_BUDGET_EXCEEDED)
	if f.export(t, b) != before {
		t.Error("the refused write changed the branch")
	}
	md := errorInfoOf(err).GetMetadata()
	if md["budgetBytes"] != "131072" || md["flag"] != "--memory-budget" || md["usedBytes"] == "" || md["requestBytes"] == "" {
		t.Errorf("ErrorInfo metadata %v, want the figures of the 131072-byte budget and the flag", md)
	}
	if msg := status.Convert(err).Message(); !strings.Contains(msg, "131072") || !strings.Contains(msg, "--memory-budget") {
		t.Errorf("the client sees %q, want the figures and the flag", msg)
	}
}

// TestHistoryObserverFailureNotReported: docs/design.md#observers: gRPC callers are never told that a
// committed write failed; the failure is logged.
func TestHistoryObserverFailureNotReported(t *testing.T) {
	f := newHistoryFixture(t)
	b := f.create(t, nil)
	id, _ := envelope.ParseID(b)
	if _, err := f.st.Observe(id, func(context.Context, uuid.UUID, *envelope.Message) error { return errors.New("observer down") }); err != nil {
		t.Fatal(err)
	}
	m := f.instruction(t, b, "kept")
	if got := f.ids(t, b, nil); len(got) != 1 || got[0] != m.GetId() {
		t.Errorf("order = %v", got)
	}
	if f.logs.FilterMessage("message-added observers failed after a committed write").Len() != 1 {
		t.Error("the observer failure was not logged")
	}
}
