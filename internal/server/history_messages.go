package server

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// SetSystem sets the branch's System at index 0 (HistoryService.SetSystem).
func (s *HistoryServer) SetSystem(ctx context.Context, req *historyv1.SetSystemRequest) (*historyv1.SetSystemResponse, error) {
	b, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	if r, ok, err := recall[store.WriteResult](ctx, s.store, &b, store.OpSetSystem, req.GetRequestId()); err != nil {
		return nil, err
	} else if ok {
		return setSystemResponse(r, s.out(!req.GetIncludeRendered())), nil
	}
	m, err := messageFromProto("system", req.GetSystem())
	if err != nil {
		return nil, err
	}
	if m.Kind() != envelope.KindSystem {
		return nil, &FieldError{Field: "system", Err: store.ErrNotSystem}
	}
	res, err := s.store.SetSystem(ctx, b, m, writeOptions(req.GetRequestId(), req.ExpectedHeadSequence))
	if err != nil {
		return nil, err
	}
	return setSystemResponse(res, s.out(!req.GetIncludeRendered())), nil
}

func setSystemResponse(r store.WriteResult, out messageOut) *historyv1.SetSystemResponse {
	return &historyv1.SetSystemResponse{System: out.stored(r.Message), HeadSequence: r.Head}
}

// AddMessage is add_message (HistoryService.AddMessage).
func (s *HistoryServer) AddMessage(ctx context.Context, req *historyv1.AddMessageRequest) (*historyv1.AddMessageResponse, error) {
	p, resp, err := s.prepareAdd(ctx, req)
	if resp != nil || err != nil {
		return resp, err
	}
	res, err := s.store.AddMessage(ctx, p.branch, p.in, p.opts)
	return s.addResult(p, res, err)
}

// addPrep is an AddMessage request worked out up to the store call: what AddMessage and each item
// of AppendMessages share, so that an item is answered as the unary call would be.
type addPrep struct {
	req    *historyv1.AddMessageRequest
	branch uuid.UUID
	in     store.AddInput
	opts   store.WriteOptions
	// recalled is set once the repeat check missed: an error after it is the request's own (a
	// field), which a stream's earlier item with the same request id may yet pre-empt.
	recalled bool
}

// prepareAdd parses the branch, answers a repeated request id from the store's record (resp set),
// then converts the request (docs/design.md#branches: the repeat check comes before any other).
func (s *HistoryServer) prepareAdd(ctx context.Context, req *historyv1.AddMessageRequest) (p addPrep, resp *historyv1.AddMessageResponse, err error) {
	p.req = req
	if p.branch, err = parseID("branch_id", req.GetBranchId()); err != nil {
		return p, nil, err
	}
	if resp, err = s.recallAdd(ctx, p); resp != nil || err != nil {
		return p, resp, err
	}
	p.recalled = true
	if p.in, err = addInputFromProto(req); err != nil {
		return p, nil, err
	}
	p.opts = writeOptions(req.GetRequestId(), req.ExpectedHeadSequence)
	return p, nil, nil
}

// recallAdd is the repeat check of p's request: its first response, or nil.
func (s *HistoryServer) recallAdd(ctx context.Context, p addPrep) (*historyv1.AddMessageResponse, error) {
	r, ok, err := recall[store.WriteResult](ctx, s.store, &p.branch, store.OpAddMessage, p.req.GetRequestId())
	if err != nil || !ok {
		return nil, err
	}
	return addMessageResponse(r, s.addOut(p.req)), nil
}

// addResult is the response of p's write, or its error as AddMessage returns it.
func (s *HistoryServer) addResult(p addPrep, res store.WriteResult, err error) (*historyv1.AddMessageResponse, error) {
	if err = s.committed("AddMessage", err); err != nil {
		return nil, factoryError(inputField(p.req), err)
	}
	return addMessageResponse(res, s.addOut(p.req)), nil
}

// addOut is how an AddMessage request's response converts its messages: rendered on request
// (include_rendered), without content on request (omit_content: an acknowledgement).
func (s *HistoryServer) addOut(req *historyv1.AddMessageRequest) messageOut {
	out := s.out(!req.GetIncludeRendered())
	out.omitContent = req.GetOmitContent()
	return out
}

func addMessageResponse(r store.WriteResult, out messageOut) *historyv1.AddMessageResponse {
	resp := &historyv1.AddMessageResponse{Message: out.stored(r.Message), Index: uint64(r.Index), HeadSequence: r.Head}
	if r.Updated != nil {
		resp.UpdatedRequest = out.stored(*r.Updated)
	}
	return resp
}

// CreateActionResponse answers an ActionRequest (HistoryService.CreateActionResponse).
func (s *HistoryServer) CreateActionResponse(ctx context.Context, req *historyv1.CreateActionResponseRequest) (*historyv1.CreateActionResponseResponse, error) {
	b, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	if r, ok, err := recall[store.WriteResult](ctx, s.store, &b, store.OpCreateActionResponse, req.GetRequestId()); err != nil {
		return nil, err
	} else if ok {
		return createActionResponseResponse(r, s.out(!req.GetIncludeRendered())), nil
	}
	in := store.ActionResponseInput{Error: req.Error}
	if in.Request, err = parseID("action_request_id", req.GetActionRequestId()); err != nil {
		return nil, err
	}
	if in.Output, err = optionalJSON("output_json", req.OutputJson); err != nil {
		return nil, err
	}
	if in.Sender, err = factoryParticipant("sender", req.GetSender()); err != nil {
		return nil, err
	}
	if in.Recipient, err = factoryParticipant("recipient", req.GetRecipient()); err != nil {
		return nil, err
	}
	res, err := s.store.CreateActionResponse(ctx, b, in, writeOptions(req.GetRequestId(), req.ExpectedHeadSequence))
	if err = s.committed("CreateActionResponse", err); err != nil {
		return nil, factoryError("action_response", err)
	}
	return createActionResponseResponse(res, s.out(!req.GetIncludeRendered())), nil
}

func createActionResponseResponse(r store.WriteResult, out messageOut) *historyv1.CreateActionResponseResponse {
	resp := &historyv1.CreateActionResponseResponse{ActionResponse: out.stored(r.Message), HeadSequence: r.Head}
	if r.Updated != nil {
		resp.ActionRequest = out.stored(*r.Updated)
	}
	return resp
}

// GetMessage returns one message (HistoryService.GetMessage).
func (s *HistoryServer) GetMessage(ctx context.Context, req *historyv1.GetMessageRequest) (*historyv1.GetMessageResponse, error) {
	b, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	m, err := parseID("message_id", req.GetMessageId())
	if err != nil {
		return nil, err
	}
	sm, err := s.store.GetMessage(ctx, b, m)
	if err != nil {
		return nil, err
	}
	resp := &historyv1.GetMessageResponse{Message: s.out(req.GetOmitRendered()).stored(sm.StoredMessage), HeadSequence: sm.Head}
	if n := proto.Size(resp); n > s.maxResponse {
		return nil, messageTooLarge(b, m, n, s.maxResponse)
	}
	return resp, nil
}

// messageTooLarge refuses a read of one message that alone does not fit in the response budget.
func messageTooLarge(branch, msg uuid.UUID, size, limit int) error {
	return &responseTooLargeError{
		what: fmt.Sprintf("message %s", msg), size: size, limit: limit,
		hint: "read it with omit_rendered, or export the branch with ExportBranchStream",
		ids:  map[string]string{"branchId": branch.String(), "messageId": msg.String()},
	}
}

// ListMessages lists a page of messages (HistoryService.ListMessages).
func (s *HistoryServer) ListMessages(ctx context.Context, req *historyv1.ListMessagesRequest) (*historyv1.ListMessagesResponse, error) {
	b, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	view, err := viewFromProto("view", req.GetView())
	if err != nil {
		return nil, err
	}
	page, err := s.store.ListMessages(ctx, b, store.ListInput{
		PageSize: int(req.GetPageSize()), PageToken: req.GetPageToken(), Descending: req.GetDescending(),
		View: view, Selected: req.GetSelected(),
	})
	if err != nil {
		return nil, err
	}
	resp := &historyv1.ListMessagesResponse{NextPageToken: page.NextPageToken, HeadSequence: page.Head}
	// Converted one at a time and counted as they are (issue 11): the page ends before the first
	// message that does not fit, and next_page_token continues from it.
	out, budget := s.out(req.GetOmitRendered()), newPageBudget(s.maxResponse)
	resp.Messages = make([]*historyv1.Message, 0, len(page.Messages))
	for i, sm := range page.Messages {
		pb := out.stored(sm)
		if n := proto.Size(pb); !budget.add(fieldSize(1, n)) {
			if i == 0 {
				return nil, messageTooLarge(b, sm.Message.ID, n+responseFixedBytes, s.maxResponse)
			}
			resp.NextPageToken = page.TokenAfter(i)
			break
		}
		resp.Messages = append(resp.Messages, pb)
	}
	return resp, nil
}

// GetLastMessage returns the last message of a view (HistoryService.GetLastMessage).
func (s *HistoryServer) GetLastMessage(ctx context.Context, req *historyv1.GetLastMessageRequest) (*historyv1.GetLastMessageResponse, error) {
	b, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	view, err := viewFromProto("view", req.GetView())
	if err != nil {
		return nil, err
	}
	sm, found, err := s.store.LastMessage(ctx, b, view)
	if err != nil {
		return nil, err
	}
	resp := &historyv1.GetLastMessageResponse{HeadSequence: sm.Head}
	if found {
		resp.Message = s.out(req.GetOmitRendered()).stored(sm.StoredMessage)
		if n := proto.Size(resp); n > s.maxResponse {
			return nil, messageTooLarge(b, sm.Message.ID, n, s.maxResponse)
		}
	}
	return resp, nil
}

// ToChatMessages projects the branch through chat_msg (HistoryService.ToChatMessages).
func (s *HistoryServer) ToChatMessages(ctx context.Context, req *historyv1.ToChatMessagesRequest) (*historyv1.ToChatMessagesResponse, error) {
	b, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	in := store.ChatInput{Selected: req.GetSelected()}
	switch req.GetFormat() {
	case historyv1.ChatFormat_CHAT_FORMAT_UNSPECIFIED, historyv1.ChatFormat_CHAT_FORMAT_LIONAGI, historyv1.ChatFormat_CHAT_FORMAT_OPENAI:
	default:
		return nil, &FieldError{Field: "format", Err: fmt.Errorf("%w: unknown chat format %d", envelope.ErrInvalid, req.GetFormat())}
	}
	if req.GetOrder() != nil {
		order, err := parseIDs("order.ids", req.GetOrder().GetIds())
		if err != nil {
			return nil, err
		}
		in.Order = &order
	}
	// Rendered here, one message at a time as the store reads it, against the render cap and the
	// response budget: the read stops at the first message past either, so refusing a big
	// branch's projection costs about the budget, not the branch.
	var proj chatProjection = newLionAGIChat(b, s.maxResponse, s.maxRendered)
	if req.GetFormat() == historyv1.ChatFormat_CHAT_FORMAT_OPENAI {
		proj = newOpenAIChat(b, s.maxResponse, s.maxRendered) // history_chat_openai.go
	}
	in.Unrendered, in.Each = true, proj.add
	res, err := s.store.ToChatMessages(ctx, b, in)
	if err != nil {
		return nil, err
	}
	return proj.response(res.Head)
}

// ClearMessages removes every message but the system (HistoryService.ClearMessages).
func (s *HistoryServer) ClearMessages(ctx context.Context, req *historyv1.ClearMessagesRequest) (*historyv1.ClearMessagesResponse, error) {
	b, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	if r, ok, err := recall[store.WriteResult](ctx, s.store, &b, store.OpClearMessages, req.GetRequestId()); err != nil {
		return nil, err
	} else if ok {
		return &historyv1.ClearMessagesResponse{HeadSequence: r.Head}, nil
	}
	res, err := s.store.ClearMessages(ctx, b, writeOptions(req.GetRequestId(), req.ExpectedHeadSequence))
	if err != nil {
		return nil, err
	}
	return &historyv1.ClearMessagesResponse{HeadSequence: res.Head}, nil
}

// SetProgression sets or unsets the selected progression (HistoryService.SetProgression).
func (s *HistoryServer) SetProgression(ctx context.Context, req *historyv1.SetProgressionRequest) (*historyv1.SetProgressionResponse, error) {
	b, err := parseID("branch_id", req.GetBranchId())
	if err != nil {
		return nil, err
	}
	if r, ok, err := recall[store.WriteResult](ctx, s.store, &b, store.OpSetProgression, req.GetRequestId()); err != nil {
		return nil, err
	} else if ok {
		return &historyv1.SetProgressionResponse{HeadSequence: r.Head}, nil
	}
	var order *[]uuid.UUID
	if req.GetProgression() != nil {
		ids, err := parseIDs("progression.ids", req.GetProgression().GetIds())
		if err != nil {
			return nil, err
		}
		order = &ids
	}
	res, err := s.store.SetProgression(ctx, b, order, writeOptions(req.GetRequestId(), req.ExpectedHeadSequence))
	if err != nil {
		return nil, err
	}
	return &historyv1.SetProgressionResponse{HeadSequence: res.Head}, nil
}
