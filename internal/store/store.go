package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Store keeps branch histories. Every method is safe for concurrent use.
// Mutations take WriteOptions (idempotency and optimistic concurrency,
// docs/design.md#branches); a failed call changes nothing. Unknown branches
// are ErrBranchNotFound, wrapped in a *BranchError.
//
// Every backend must pass storetest.Run.
type Store interface {
	// CreateBranch creates a branch (LionAGI's Branch(...)). An id that is
	// taken is ErrBranchExists.
	CreateBranch(ctx context.Context, in CreateBranchInput) (BranchResult, error)
	// ImportBranch creates a branch from LionAGI JSON, replaying the
	// records through the D3 rules in order (docs/design.md#branches).
	ImportBranch(ctx context.Context, in ImportInput) (BranchResult, error)
	// ForkBranch copies a branch up to and including a message (
	// docs/design.md#branches).
	ForkBranch(ctx context.Context, in ForkInput) (BranchResult, error)
	// GetBranch describes a branch.
	GetBranch(ctx context.Context, id uuid.UUID) (BranchInfo, error)
	// ListBranches pages through the branches in id order.
	ListBranches(ctx context.Context, pageSize int, pageToken string) (BranchPage, error)
	// DeleteBranch deletes a branch; its subscriptions end with
	// ErrBranchDeleted.
	DeleteBranch(ctx context.Context, id uuid.UUID, opts WriteOptions) (DeleteResult, error)
	// ExportBranch writes the branch as LionAGI's Branch.to_dict(in.Mode).
	ExportBranch(ctx context.Context, id uuid.UUID, in ExportInput) (Export, error)

	// SetSystem is set_system: the message (a System) becomes index 0,
	// replacing the previous system (ADR-0006 D3 "Single system").
	SetSystem(ctx context.Context, branch uuid.UUID, system *envelope.Message, opts WriteOptions) (WriteResult, error)
	// AddMessage is add_message: the factory (or a pre-built message), then
	// add-or-replace, then the observers (ADR-0006 D3, D4). Observer
	// failures come back as an *ObserverError together with the result of
	// the committed write.
	AddMessage(ctx context.Context, branch uuid.UUID, in AddInput, opts WriteOptions) (WriteResult, error)
	// CreateActionResponse answers an ActionRequest: the response and the
	// request's action_response_id, two events committed together.
	CreateActionResponse(ctx context.Context, branch uuid.UUID, in ActionResponseInput, opts WriteOptions) (WriteResult, error)
	// ClearMessages is clear_messages: everything but the system goes.
	ClearMessages(ctx context.Context, branch uuid.UUID, opts WriteOptions) (WriteResult, error)
	// SetProgression sets the selected progression (nil unsets it); it
	// never deletes records (ADR-0006 D3).
	SetProgression(ctx context.Context, branch uuid.UUID, order *[]uuid.UUID, opts WriteOptions) (WriteResult, error)

	// GetMessage returns one message, and the branch's head.
	GetMessage(ctx context.Context, branch, message uuid.UUID) (MessageRead, error)
	// ListMessages pages through the branch, a view, or the selected
	// progression, in O(page).
	ListMessages(ctx context.Context, branch uuid.UUID, in ListInput) (MessagePage, error)
	// LastMessage returns the last message of a view (last_instruction,
	// last_response), and the branch's head; found is false on a miss,
	// which still returns the head.
	LastMessage(ctx context.Context, branch uuid.UUID, view View) (msg MessageRead, found bool, err error)
	// ToChatMessages is to_chat_msgs (ADR-0006 D3 "Raw projection").
	ToChatMessages(ctx context.Context, branch uuid.UUID, in ChatInput) (ChatResult, error)

	// Recall returns the result a request id already produced for op on a
	// branch (branch nil: principal's scope of create, import and fork,
	// ADR-0010; for OpDeleteBranch, branch is the branch deleted), so that callers can
	// answer a repeat before validating it (docs/design.md#idempotency: "The repeat check
	// comes before any other check"). The writes themselves check again,
	// atomically. A request id that another op used is ErrRequestIDReused.
	// A remembered BranchResult carries only the branch's system in
	// Messages, the one message a response returns.
	Recall(ctx context.Context, principal string, branch *uuid.UUID, op Op, requestID string) (result any, ok bool, err error)

	// Observe adds a message-added observer to a branch and returns the
	// function that removes it (ADR-0006 D4).
	Observe(branch uuid.UUID, o Observer) (remove func(), err error)
	// Subscribe opens a subscription to the branch's commits (
	// docs/design.md#sequences): the retained commits after the
	// cursor, then live ones, with no gap and no duplicate, optionally
	// restricted to some event kinds. A cursor of another incarnation or
	// older than the log is ErrHistoryCompacted, one ahead of the head
	// ErrCursorAhead; past the store's limit of open subscriptions it is
	// ErrTooManySubscriptions. The writer never waits: Subscribe copies no
	// replay (the subscriber reads the log as it catches up, and what is
	// written meanwhile does not fill its buffer), and a subscriber whose
	// bounded buffer overflows, or whose replay the log's retention
	// overtakes, is ended with ErrSubscriberTooSlow; every
	// subscriber open when the branch is deleted gets BRANCH_DELETED as its
	// last commit and ends with ErrBranchDeleted.
	Subscribe(ctx context.Context, branch uuid.UUID, in SubscribeInput) (*Subscription, error)
}

// Observer is told about a message after the write that added it was
// committed and the branch lock released, so it may write to the branch
// again (ADR-0006 D4). Its error is returned to the writer, joined with the
// others'; it never undoes the write.
type Observer func(ctx context.Context, branch uuid.UUID, m *envelope.Message) error

// Op names a mutation for the idempotency records.
type Op string

// The mutations that take a request id.
const (
	OpCreateBranch         Op = "CreateBranch"
	OpImportBranch         Op = "ImportBranch"
	OpForkBranch           Op = "ForkBranch"
	OpDeleteBranch         Op = "DeleteBranch"
	OpSetSystem            Op = "SetSystem"
	OpAddMessage           Op = "AddMessage"
	OpCreateActionResponse Op = "CreateActionResponse"
	OpClearMessages        Op = "ClearMessages"
	OpSetProgression       Op = "SetProgression"
)
