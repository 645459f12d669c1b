package store

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// View selects the messages of one typed view of a branch (ADR-0006 D3
// "Typed views": strict-type filtered piles in progression order).
type View uint8

// The views. ViewAll is the whole branch.
const (
	ViewAll View = iota
	ViewInstructions
	ViewAssistantResponses
	ViewActions // action requests and action responses
	ViewActionRequests
	ViewActionResponses
	numViews
)

// String names the view as LionAGI's property does.
func (v View) String() string {
	switch v {
	case ViewInstructions:
		return "instructions"
	case ViewAssistantResponses:
		return "assistant_responses"
	case ViewActions:
		return "actions"
	case ViewActionRequests:
		return "action_requests"
	case ViewActionResponses:
		return "action_responses"
	}
	return "all"
}

// viewsOf returns the views other than ViewAll that a message kind belongs to.
func viewsOf(k envelope.Kind) []View {
	switch k {
	case envelope.KindInstruction:
		return []View{ViewInstructions}
	case envelope.KindAssistantResponse:
		return []View{ViewAssistantResponses}
	case envelope.KindActionRequest:
		return []View{ViewActions, ViewActionRequests}
	case envelope.KindActionResponse:
		return []View{ViewActions, ViewActionResponses}
	}
	return nil
}

// BranchInfo describes a branch: its Element identity (id, created_at,
// metadata), LionAGI's user and name, its lineage, and its sequences.
type BranchInfo struct {
	ID uuid.UUID
	// Incarnation is made when the branch is created (also by import and
	// fork); a watch cursor of another incarnation is out of range
	// (docs/design.md#sequences).
	Incarnation uuid.UUID
	// CreatedAt is Unix seconds, as LionAGI stores it.
	CreatedAt float64
	// Metadata is the branch's metadata object (without lion_class and
	// without current_progression, which is the selected progression).
	Metadata jsonv.Value
	// Name and User are LionAGI's Branch.name and Branch.user; nil is None.
	Name *string
	User *string
	// ParentBranchID and ForkPoint record where ForkBranch copied from.
	ParentBranchID *uuid.UUID
	ForkPoint      *uuid.UUID
	// HeadSequence is the sequence of the last event (BRANCH_CREATED is 1).
	HeadSequence uint64
	// MessageCount is the number of messages, the system included.
	MessageCount int
	// SystemID is the id of the system message at index 0, if any.
	SystemID *uuid.UUID
	// Selected reports whether a selected progression is set (ADR-0006 D3:
	// Branch.progression, metadata["current_progression"]).
	Selected bool
}

// StoredMessage is a message as the branch holds it, with the sequence of
// its last write (docs/design.md#sequences).
type StoredMessage struct {
	Message  *envelope.Message
	Sequence uint64
}

// MessageRead is what GetMessage and LastMessage return: a message as the
// branch holds it, and the branch's head when it was read (docs/design.md#optimistic-concurrency:
// responses return the head sequence).
type MessageRead struct {
	StoredMessage
	Head uint64
}

// WriteOptions are the options every branch mutation takes (
// docs/design.md#branches: idempotency and optimistic concurrency).
type WriteOptions struct {
	// RequestID, when not empty, makes the write idempotent: a repeat
	// within the window returns the first result and writes nothing.
	RequestID string
	// ExpectedHead, when not nil, must equal the head sequence, else the
	// write fails with ErrSequenceMismatch.
	ExpectedHead *uint64
}

// WriteResult is what a message write returns.
type WriteResult struct {
	// Message is the message written (for an action response: the
	// response); zero for writes that write no message.
	Message StoredMessage
	// Index is the message's position in the full order after the write.
	Index int
	// Updated is the ActionRequest whose action_response_id a new response
	// set (ADR-0006 D2 "New response correlation"), else nil.
	Updated *StoredMessage
	// Head is the branch's head sequence after the write.
	Head uint64
	// Replayed is true when a repeated request id returned the first result.
	Replayed bool
}

// BranchResult is what CreateBranch, ImportBranch and ForkBranch return.
type BranchResult struct {
	Branch BranchInfo
	// Messages are the branch's initial messages in order. A replay
	// (Replayed) carries only the system, if any: the one message a
	// response returns, and all that the store keeps for a repeat.
	Messages []StoredMessage
	// Replayed is true when a repeated request id returned the first result.
	Replayed bool
}

// DeleteResult is what DeleteBranch returns.
type DeleteResult struct {
	BranchID uuid.UUID
	// LastSequence is the sequence of the BRANCH_DELETED event.
	LastSequence uint64
	Replayed     bool
}

// CreateBranchInput are the arguments of CreateBranch: LionAGI's
// Branch(user=, name=, system=, system_sender=, system_datetime=) and, as
// MessageManager(messages=, system=) does, pre-built initial messages.
type CreateBranchInput struct {
	// ID is the branch id; the zero UUID means a new one.
	ID uuid.UUID
	// CreatedAt is Unix seconds; nil means now.
	CreatedAt *float64
	Name      *string
	User      *string
	Metadata  jsonv.Value
	// System is the system text, run through the factory as Branch does:
	// when System or SystemDatetime is truthy, add_message(system=...,
	// system_datetime=..., sender=SystemSender or User or "system",
	// recipient=<branch id>).
	System         jsonv.Value
	SystemDatetime jsonv.Value
	SystemSender   *string
	// SystemMessage is a pre-built System set with set_system after
	// Messages (ADR-0006 D3: MessageManager(system=) must be a System).
	SystemMessage *envelope.Message
	// Messages are pre-built initial messages, added in order with D3's
	// add-or-replace rule.
	Messages []*envelope.Message
	// RequestID makes the create idempotent in Principal's scope.
	RequestID string
	// Principal names the caller whose scope RequestID is remembered in
	// (ADR-0010: one scope per principal for create, import and fork; ""
	// is the one scope of a server without auth).
	Principal string
}

// ImportInput are the arguments of ImportBranch.
type ImportInput struct {
	// Data is a LionAGI Branch.to_dict, Pile.to_dict or list of message
	// dicts, in python, json or db mode (docs/design.md#branches).
	Data jsonv.Value
	// ID, when not zero, is the new branch's id instead of the payload's.
	ID uuid.UUID
	// NewID asks for a server-made id whatever the payload says.
	NewID bool
	// DBMetaKey is the metadata key of a db-mode payload written with a
	// custom one (ExportBranch's dbMetaKey); node_metadata and metadata are
	// read too, this key first.
	DBMetaKey string
	// RequestID makes the import idempotent in Principal's scope.
	RequestID string
	// Principal is the caller's idempotency scope (CreateBranchInput).
	Principal string
}

// BranchID is the id an import creates its branch under, given the id the
// payload names (nil: none): ID when set, else the payload's unless NewID
// asks for a server-made one; zero means a new id (every engine).
func (in ImportInput) BranchID(payload *uuid.UUID) uuid.UUID {
	if in.ID == (uuid.UUID{}) && !in.NewID && payload != nil {
		return *payload
	}
	return in.ID
}

// ForkInput are the arguments of ForkBranch.
type ForkInput struct {
	Source uuid.UUID
	// At is the last message copied (inclusive); nil copies them all.
	At *uuid.UUID
	// ID is the new branch's id; zero means a new one.
	ID   uuid.UUID
	Name *string
	// ExpectedHead, when not nil, must equal the source's head sequence, so
	// that a fork copies the history the caller saw.
	ExpectedHead *uint64
	// RequestID makes the fork idempotent in Principal's scope.
	RequestID string
	// Principal is the caller's idempotency scope (CreateBranchInput).
	Principal string
}

// AddInput is what AddMessage writes: either the factory inputs of
// ADR-0006 D3 (with existing branch messages named by id), or a pre-built
// message written as it is.
type AddInput struct {
	Factory Factory
	// Target names an existing message of the branch that the factory
	// updates in place (LionAGI: add_message(instruction=<existing>, ...)).
	// Its kind cannot change: factory inputs of another kind than the
	// target's are ErrKindChange naming target_id.
	Target *uuid.UUID
	// TargetKind, when not nil, is the kind of message the caller's input
	// is for (AddMessage's input oneof), so that a target of another kind
	// is ErrKindChange even when the input gives no content field.
	TargetKind *envelope.Kind
	// ActionRequest names the existing ActionRequest an action output
	// answers (LionAGI: add_message(action_request=<existing>,
	// action_output=...)).
	ActionRequest *uuid.UUID
	// Message is a pre-built message; when set the other fields must be
	// empty.
	Message *envelope.Message
}

// ActionResponseInput are the arguments of CreateActionResponse (ADR-0006
// D2 "New response correlation").
type ActionResponseInput struct {
	// Request is the ActionRequest answered.
	Request uuid.UUID
	// Output is the function's output; JSON null when none.
	Output jsonv.Value
	// Error is the failure message; nil on success.
	Error *string
	// Sender and Recipient are JSON null (None, LionAGI's default) or text.
	Sender, Recipient jsonv.Value
}

// ListInput selects a page of a branch's messages.
type ListInput struct {
	// PageSize is the page's size: 0 means DefaultPageSize; more than
	// MaxPageSize means MaxPageSize; negative is an error.
	PageSize int
	// PageToken continues a listing; empty starts one.
	PageToken string
	// Descending lists from the newest message.
	Descending bool
	// View filters by kind. It cannot be combined with Selected.
	View View
	// Selected lists the branch's selected progression (the full order when
	// none is set).
	Selected bool
}

// Paging bounds (docs/development.md#style-proto: lists are paginated from the start).
const (
	DefaultPageSize = 50
	MaxPageSize     = 1000
)

// MessagePage is one page of messages.
type MessagePage struct {
	Messages []StoredMessage
	// NextPageToken continues the listing; empty at the end.
	NextPageToken string
	Head          uint64
	// TokenAfter returns the token that continues the listing after the
	// page's first n messages (0 < n < len(Messages)), for a reader that
	// cuts the page short (issue 11: the response budget). Nil on an empty
	// page.
	TokenAfter func(n int) string
}

// BranchPage is one page of branches, in id order.
type BranchPage struct {
	Branches      []BranchInfo
	NextPageToken string
	// TokenAfter returns the token that continues the listing after the
	// page's first n branches (0 < n < len(Branches)), as MessagePage's.
	TokenAfter func(n int) string
}

// ChatInput selects the order ToChatMessages projects (ADR-0006 D3 "Raw
// projection").
type ChatInput struct {
	// Order, when not nil, is the order to project: empty gives no
	// messages; every id must be a member. Nil projects the full order.
	Order *[]uuid.UUID
	// Selected projects the selected progression (when Order is nil); one
	// that is set but empty projects nothing, as an empty Order does.
	Selected bool
	// Unrendered leaves the rendering to the caller: the entries carry
	// their Message and no Chat (issue 11: the server renders them one at
	// a time against its render cap and response budget, instead of
	// holding every rendering at once).
	Unrendered bool
	// Each, when set, is handed the projection one message at a time, in
	// order, as the store reads it, and the result's Entries stay empty:
	// the caller renders and counts each message and keeps what it needs,
	// so the read holds one message at a time, not the branch, and an
	// error from Each (the response budget passed) ends the read there
	// and is the call's error, as it is. Without it a projection of a big
	// branch was read whole before the server could refuse it (a
	// 1000x20 KB branch cost 60 MiB to refuse a 4 MiB response). i counts
	// from 0; an engine that runs its read again (PostgreSQL, after a
	// serialization failure) starts again at 0, so a caller starts afresh
	// when i is 0. The SQL engines call Each inside their read
	// transaction, the memory engine after it let the branch lock go.
	Each func(i int, m *envelope.Message) error
}

// ChatEntry is one message's chat projection; Err is set (and Chat zero)
// when the message cannot be rendered, as LionAGI's chat_msg is None.
type ChatEntry struct {
	MessageID uuid.UUID
	Chat      envelope.ChatMessage
	Err       error
	// Message is the message projected (always set; shared, never changed).
	Message *envelope.Message
}

// ChatResult is what ToChatMessages returns.
type ChatResult struct {
	Entries []ChatEntry
	Head    uint64
}

// ExportInput says how ExportBranch writes a branch.
type ExportInput struct {
	// Mode is Branch.to_dict's mode.
	Mode envelope.Mode
	// DBMetaKey is a custom db-mode metadata key for the branch's metadata.
	DBMetaKey string
	// Each, when set, is shown each message of the full order as the store
	// reads it, before the export is built; an error from Each ends the
	// read there and is the call's error, as it is. A caller with a byte
	// budget adds up ExportedLen and refuses at the first message past it,
	// so refusing a branch larger than the budget costs about the budget,
	// not the branch. i restarts at 0 as ChatInput.Each's does.
	Each func(i int, m *envelope.Message) error
}

// Export is a branch written as LionAGI JSON.
type Export struct {
	Data jsonv.Value
	Head uint64
}
