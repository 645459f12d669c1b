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
)

// openAIChat is the projection in CHAT_FORMAT_OPENAI: envelope.OpenAIMessages, as JSON text in
// messages_json, with the message ids and render errors per projected message as with the LionAGI
// format. The render cap and the response budget apply as they do to the LionAGI format (issue
// 11): each message's JSON is counted against the budget as it is projected (envelope's
// OpenAIProjection), and the call is refused at the first message that does not fit, or that
// renders past the cap, before any later one is read or anything is marshalled whole. A message
// that cannot be rendered is left out of the array but keeps its id and render error, counted
// where it comes.
type openAIChat struct {
	branch              uuid.UUID
	maxRendered, budget int
	proj                *envelope.OpenAIProjection
	used                pageBudget
	ids, renderErrors   []string
}

func newOpenAIChat(branch uuid.UUID, maxResponse, maxRendered int) *openAIChat {
	c := &openAIChat{branch: branch, maxRendered: maxRendered, budget: maxResponse}
	c.reset()
	return c
}

func (c *openAIChat) reset() {
	c.proj, c.used, c.ids, c.renderErrors = envelope.NewOpenAIProjection(c.maxRendered), newPageBudget(c.budget), nil, nil
	c.used.add(protowire.SizeTag(5) + binary.MaxVarintLen64 + 2) // messages_json's tag, length and brackets
}

func (c *openAIChat) add(i int, m *envelope.Message) error {
	if i == 0 {
		c.reset()
	}
	id := m.ID.String()
	over := 0
	ok, err := c.proj.Add(m, func(n int) bool {
		n += fieldSize(2, len(id)) + fieldSize(3, 0)
		if !c.used.add(n) {
			over = n
			return false
		}
		return true
	})
	renderErr := ""
	if tl, isTL := errors.AsType[*envelope.RenderTooLargeError](err); isTL {
		return &renderTooLargeError{branch: c.branch, message: m.ID, tl: tl}
	} else if err != nil {
		renderErr = err.Error()
		// a message left out still has its id and render error in the response
		if n := fieldSize(2, len(id)) + fieldSize(3, len(renderErr)); !c.used.add(n) {
			return chatTooLarge("OpenAI chat projection", c.branch, i, id, c.used.used+n, c.budget)
		}
	} else if !ok {
		return chatTooLarge("OpenAI chat projection", c.branch, i, id, c.used.used+over, c.budget)
	}
	c.ids = append(c.ids, id)
	c.renderErrors = append(c.renderErrors, renderErr)
	return nil
}

func (c *openAIChat) response(head uint64) (*historyv1.ToChatMessagesResponse, error) {
	resp := &historyv1.ToChatMessagesResponse{HeadSequence: head, MessageIds: c.ids, RenderErrors: c.renderErrors,
		MessagesJson: string(jsonv.Marshal(c.proj.Array()))}
	if n := proto.Size(resp); n > c.budget { // a backstop: the count above is meant to be exact or over
		return nil, &responseTooLargeError{
			what: fmt.Sprintf("the OpenAI chat projection of %d messages", len(c.ids)),
			size: n, limit: c.budget,
			hint: "project fewer messages with order, or export the branch with ExportBranchStream",
			ids:  map[string]string{"branchId": c.branch.String()},
		}
	}
	return resp, nil
}
