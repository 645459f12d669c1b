package server

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
)

// nilUUIDForms are the nil UUID in forms Python's uuid.UUID(str) accepts.
var nilUUIDForms = []string{
	"00000000-0000-0000-0000-000000000000",
	"00000000000000000000000000000000",
	"{urn:uuid:00000000-0000-0000-0000-000000000000}",
}

// TestNilUUIDRefused: issue 11 case 8: "a branch_id of the nil UUID ... is silently replaced by a
// random id on create (and GetBranch with it is NOT_FOUND): refuse it as INVALID_ARGUMENT
// everywhere", and so for every UUID-typed id a request carries (message, target, owner ids, the
// ids inside LionAGI JSON), each naming its field.
func TestNilUUIDRefused(t *testing.T) {
	f := newHistoryFixture(t)
	ex := newExchangeFixture(t, nil)
	ctx := testContext(t)
	created, err := f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{System: &historyv1.SystemInput{SystemMessage: strPtr("S")}})
	if err != nil {
		t.Fatal(err)
	}
	b := created.GetBranch().GetId()
	ins := f.instruction(t, b, "hello").GetId()
	owner := "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"
	ex.register(t, owner)
	before := f.export(t, b)

	for _, nilID := range nilUUIDForms {
		for _, tc := range []struct {
			name  string
			field string
			call  func(ctx context.Context, id string) error
		}{
			{"CreateBranch", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.CreateBranch(ctx, &historyv1.CreateBranchRequest{BranchId: id})
				return err
			}},
			{"GetBranch", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: id})
				return err
			}},
			{"DeleteBranch", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: id})
				return err
			}},
			{"ForkBranch", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.ForkBranch(ctx, &historyv1.ForkBranchRequest{BranchId: id})
				return err
			}},
			{"ForkBranch message", "message_id", func(ctx context.Context, id string) error {
				_, err := f.c.ForkBranch(ctx, &historyv1.ForkBranchRequest{BranchId: b, MessageId: id})
				return err
			}},
			{"ForkBranch new branch", "new_branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.ForkBranch(ctx, &historyv1.ForkBranchRequest{BranchId: b, NewBranchId: id})
				return err
			}},
			{"SetSystem", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.SetSystem(ctx, &historyv1.SetSystemRequest{BranchId: id, System: &historyv1.Message{
					Content: &historyv1.Message_System{System: &historyv1.SystemContent{SystemMessage: strPtr("S2")}}}})
				return err
			}},
			{"AddMessage", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: id, Input: instructionInput("x")})
				return err
			}},
			{"AddMessage target", "target_id", func(ctx context.Context, id string) error {
				_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, TargetId: id, Input: instructionInput("x")})
				return err
			}},
			{"AddMessage pre-built message id", "message.id", func(ctx context.Context, id string) error {
				_, err := f.c.AddMessage(ctx, &historyv1.AddMessageRequest{BranchId: b, Input: &historyv1.AddMessageRequest_Message{Message: &historyv1.Message{
					Id: id, Content: &historyv1.Message_AssistantResponse{AssistantResponse: &historyv1.AssistantResponseContent{AssistantResponse: "x"}}}}})
				return err
			}},
			{"CreateActionResponse", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: id, ActionRequestId: ins})
				return err
			}},
			{"CreateActionResponse request", "action_request_id", func(ctx context.Context, id string) error {
				_, err := f.c.CreateActionResponse(ctx, &historyv1.CreateActionResponseRequest{BranchId: b, ActionRequestId: id})
				return err
			}},
			{"GetMessage", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: id, MessageId: ins})
				return err
			}},
			{"GetMessage message", "message_id", func(ctx context.Context, id string) error {
				_, err := f.c.GetMessage(ctx, &historyv1.GetMessageRequest{BranchId: b, MessageId: id})
				return err
			}},
			{"ListMessages", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: id})
				return err
			}},
			{"GetLastMessage", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.GetLastMessage(ctx, &historyv1.GetLastMessageRequest{BranchId: id})
				return err
			}},
			{"ToChatMessages", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: id})
				return err
			}},
			{"ToChatMessages order", "order.ids[1]", func(ctx context.Context, id string) error {
				_, err := f.c.ToChatMessages(ctx, &historyv1.ToChatMessagesRequest{BranchId: b, Order: &historyv1.MessageIds{Ids: []string{ins, id}}})
				return err
			}},
			{"ClearMessages", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.ClearMessages(ctx, &historyv1.ClearMessagesRequest{BranchId: id})
				return err
			}},
			{"SetProgression", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.SetProgression(ctx, &historyv1.SetProgressionRequest{BranchId: id})
				return err
			}},
			{"SetProgression ids", "progression.ids[0]", func(ctx context.Context, id string) error {
				_, err := f.c.SetProgression(ctx, &historyv1.SetProgressionRequest{BranchId: b, Progression: &historyv1.MessageIds{Ids: []string{id}}})
				return err
			}},
			{"ImportBranch", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{BranchId: id, Data: "[]"})
				return err
			}},
			{"ImportBranch payload branch id", "data.id", func(ctx context.Context, id string) error {
				_, err := f.c.ImportBranch(ctx, &historyv1.ImportBranchRequest{Data: `{"id": "` + id + `", "messages": []}`})
				return err
			}},
			{"ExportBranch", "branch_id", func(ctx context.Context, id string) error {
				_, err := f.c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: id})
				return err
			}},
			{"WatchBranch", "branch_id", func(ctx context.Context, id string) error {
				s, err := f.c.WatchBranch(ctx, &historyv1.WatchBranchRequest{BranchId: id})
				if err != nil {
					return err
				}
				_, err = s.Recv()
				return err
			}},
			{"Register", "owner_id", func(ctx context.Context, id string) error {
				_, err := ex.client.Register(ctx, &historyv1.RegisterRequest{OwnerId: id})
				return err
			}},
			{"Send", "sender", func(ctx context.Context, id string) error {
				_, err := ex.client.Send(ctx, &historyv1.SendRequest{Sender: id})
				return err
			}},
			{"Receive", "owner_id", func(ctx context.Context, id string) error {
				_, err := ex.client.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: id})
				return err
			}},
			{"PopMessage", "owner_id", func(ctx context.Context, id string) error {
				_, err := ex.client.PopMessage(ctx, &historyv1.PopMessageRequest{OwnerId: id})
				return err
			}},
			{"SubscribeInbox", "owner_id", func(ctx context.Context, id string) error {
				s, err := ex.client.SubscribeInbox(ctx, &historyv1.SubscribeInboxRequest{OwnerId: id})
				if err != nil {
					return err
				}
				_, err = s.Recv()
				return err
			}},
		} {
			t.Run(tc.name+"/"+nilID, func(t *testing.T) {
				err := tc.call(ctx, nilID)
				_, field := wantStatus(t, err, codes.InvalidArgument, historyv1.ErrorReason_ERROR_REASON_INVALID_FIELD)
				if field != tc.field {
					t.Errorf("field = %q, want %q (%v)", field, tc.field, err)
				}
			})
		}
	}
	if after := f.export(t, b); after != before {
		t.Error("a refused call wrote to the branch")
	}
	page, err := f.c.ListBranches(ctx, &historyv1.ListBranchesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(page.GetBranches()); n != 1 {
		t.Errorf("%d branches after the refused calls, want 1", n)
	}
}

// TestParseElementIDNil: envelope.ParseElementID is where the nil UUID is refused (issue 11 case 8).
func TestParseElementIDNil(t *testing.T) {
	for _, s := range nilUUIDForms {
		if _, ok, err := envelope.ParseElementID(s); !ok || err == nil {
			t.Errorf("ParseElementID(%q) = %v, %v; want ErrNilID", s, ok, err)
		}
	}
	if id, ok, err := envelope.ParseElementID("00000000-0000-0000-0000-000000000001"); !ok || err != nil || id.String() != "00000000-0000-0000-0000-000000000001" {
		t.Errorf("ParseElementID(...0001) = %v, %v, %v", id, ok, err)
	}
}
