package server

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// openAIChat is ToChatMessages with CHAT_FORMAT_OPENAI: the projection is
// envelope.OpenAIMessages, as JSON text in messages_json, with the message ids and render errors
// per projected message as with the LionAGI format. The render cap and the response budget apply
// as they do to the LionAGI format (issue 11): each message's JSON is counted against the budget
// as it is projected, and the call is refused at the first message that does not fit, before the
// rest are rendered or anything is marshalled whole.
func (s *HistoryServer) openAIChat(b uuid.UUID, res store.ChatResult) (*historyv1.ToChatMessagesResponse, error) {
	msgs := make([]*envelope.Message, len(res.Entries))
	for i, e := range res.Entries {
		msgs[i] = e.Message
	}
	budget := newPageBudget(s.maxResponse)
	budget.add(protowire.SizeTag(5) + binary.MaxVarintLen64 + 2) // messages_json's tag, length and brackets
	tooLarge := func(i, n int) error {
		id := res.Entries[i].MessageID.String()
		return &responseTooLargeError{
			what: fmt.Sprintf("the OpenAI chat projection of %d messages (message %d, %s, did not fit)", len(res.Entries), i+1, id),
			size: budget.used + n, limit: s.maxResponse,
			hint: "project fewer messages with order, or export the branch with ExportBranchStream",
			ids:  map[string]string{"branchId": b.String(), "messageId": id},
		}
	}
	overflow, overflowBytes := -1, 0
	arr, errs, stopped := envelope.OpenAIMessagesWithin(msgs, s.maxRendered, func(i, n int) bool {
		n += fieldSize(2, len(res.Entries[i].MessageID.String())) + fieldSize(3, 0)
		if !budget.add(n) {
			overflow, overflowBytes = i, n
			return false
		}
		return true
	})
	resp := &historyv1.ToChatMessagesResponse{HeadSequence: res.Head}
	for i, e := range res.Entries[:stopped] {
		renderErr := ""
		if tl, ok := errors.AsType[*envelope.RenderTooLargeError](errs[i]); ok {
			return nil, &renderTooLargeError{branch: b, message: e.MessageID, tl: tl}
		} else if errs[i] != nil {
			renderErr = errs[i].Error()
			// a message left out still has its id and render error in the response
			if n := fieldSize(2, len(e.MessageID.String())) + fieldSize(3, len(renderErr)); !budget.add(n) {
				return nil, tooLarge(i, n)
			}
		}
		resp.MessageIds = append(resp.MessageIds, e.MessageID.String())
		resp.RenderErrors = append(resp.RenderErrors, renderErr)
	}
	if overflow >= 0 {
		return nil, tooLarge(overflow, overflowBytes)
	}
	resp.MessagesJson = string(jsonv.Marshal(arr))
	if n := proto.Size(resp); n > s.maxResponse { // a backstop: the count above is meant to be exact or over
		return nil, &responseTooLargeError{
			what: fmt.Sprintf("the OpenAI chat projection of %d messages", len(res.Entries)),
			size: n, limit: s.maxResponse,
			hint: "project fewer messages with order, or export the branch with ExportBranchStream",
			ids:  map[string]string{"branchId": b.String()},
		}
	}
	return resp, nil
}
