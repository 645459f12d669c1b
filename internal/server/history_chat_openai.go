package server

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// openAIChat is ToChatMessages with CHAT_FORMAT_OPENAI: the projection is
// envelope.OpenAIMessages, as JSON text in messages_json, with the message ids and render errors
// per projected message as with the LionAGI format. The render cap and the response budget apply
// as they do to the LionAGI format (issue 11).
func (s *HistoryServer) openAIChat(b uuid.UUID, res store.ChatResult) (*historyv1.ToChatMessagesResponse, error) {
	msgs := make([]*envelope.Message, len(res.Entries))
	for i, e := range res.Entries {
		msgs[i] = e.Message
	}
	arr, errs := envelope.OpenAIMessages(msgs, s.maxRendered)
	resp := &historyv1.ToChatMessagesResponse{HeadSequence: res.Head, MessagesJson: string(jsonv.Marshal(arr))}
	for i, e := range res.Entries {
		renderErr := ""
		if tl, ok := errors.AsType[*envelope.RenderTooLargeError](errs[i]); ok {
			return nil, &renderTooLargeError{branch: b, message: e.MessageID, tl: tl}
		} else if errs[i] != nil {
			renderErr = errs[i].Error()
		}
		resp.MessageIds = append(resp.MessageIds, e.MessageID.String())
		resp.RenderErrors = append(resp.RenderErrors, renderErr)
	}
	if n := proto.Size(resp); n > s.maxResponse {
		return nil, &responseTooLargeError{
			what: fmt.Sprintf("the OpenAI chat projection of %d messages", len(res.Entries)),
			size: n, limit: s.maxResponse,
			hint: "project fewer messages with order, or export the branch with ExportBranchStream",
			ids:  map[string]string{"branchId": b.String()},
		}
	}
	return resp, nil
}
