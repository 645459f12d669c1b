package server

import (
	"errors"
	"fmt"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
)

// chatProjection builds a ToChatMessages response from the messages the store hands it one at a
// time (store.ChatInput.Each), counting each against the response budget as it goes. It is handed
// each message inside the store's read and keeps only what the response holds, so a projection
// past the budget is refused having read, rendered and held about the budget, not the branch.
type chatProjection interface {
	// add renders message i and counts it; its error (the budget or the render cap passed) stops
	// the read and is the call's. i is 0 again when the store runs its read again: start afresh.
	add(i int, m *envelope.Message) error
	// response is the projection of every message added.
	response(head uint64) (*historyv1.ToChatMessagesResponse, error)
}

// chatTooLarge refuses a projection at message i, id, which did not fit: size is what the response
// had counted with it, a lower bound of the whole projection's size, which is not read further.
func chatTooLarge(format string, branch uuid.UUID, i int, id string, size, limit int) error {
	return &responseTooLargeError{
		what: fmt.Sprintf("the %s up to message %d (%s, which did not fit)", format, i+1, id), atLeast: true,
		size: size, limit: limit,
		hint: "project fewer messages with order, or export the branch with ExportBranchStream",
		ids:  map[string]string{"branchId": branch.String(), "messageId": id},
	}
}

// lionAGIChat is the projection in CHAT_FORMAT_LIONAGI: a ChatMessage per message, rendered within
// the render cap (a message past it fails the call rather than leave it out of a prompt).
type lionAGIChat struct {
	branch              uuid.UUID
	maxRendered, budget int
	used                pageBudget
	resp                *historyv1.ToChatMessagesResponse
}

func newLionAGIChat(branch uuid.UUID, maxResponse, maxRendered int) *lionAGIChat {
	c := &lionAGIChat{branch: branch, maxRendered: maxRendered, budget: maxResponse}
	c.reset()
	return c
}

func (c *lionAGIChat) reset() {
	c.used, c.resp = newPageBudget(c.budget), &historyv1.ToChatMessagesResponse{}
}

func (c *lionAGIChat) add(i int, m *envelope.Message) error {
	if i == 0 {
		c.reset()
	}
	chat, err := m.ChatMsgWithin(c.maxRendered)
	cm, renderErr := &historyv1.ChatMessage{}, ""
	if tl, ok := errors.AsType[*envelope.RenderTooLargeError](err); ok {
		return &renderTooLargeError{branch: c.branch, message: m.ID, tl: tl}
	} else if err != nil {
		renderErr = err.Error()
	} else {
		cm = chatMessageToProto(chat)
	}
	id := m.ID.String()
	n := fieldSize(1, proto.Size(cm)) + fieldSize(2, len(id)) + fieldSize(3, len(renderErr))
	if !c.used.add(n) {
		return chatTooLarge("chat projection", c.branch, i, id, c.used.used+n, c.budget)
	}
	c.resp.Messages = append(c.resp.Messages, cm)
	c.resp.MessageIds = append(c.resp.MessageIds, id)
	c.resp.RenderErrors = append(c.resp.RenderErrors, renderErr)
	return nil
}

func (c *lionAGIChat) response(head uint64) (*historyv1.ToChatMessagesResponse, error) {
	c.resp.HeadSequence = head
	return c.resp, nil
}
