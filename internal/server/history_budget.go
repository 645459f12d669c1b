package server

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/historyd/historyd/internal/envelope"
)

// The byte bounds of HistoryService responses (issue 11; docs/decisions/0008).
const (
	// DefaultMaxResponseBytes is the response budget (--max-response-bytes): 4 MiB, the receive
	// limit gRPC clients default to (grpc-go, grpc-java, grpc-node), so a client that kept its
	// defaults can read every response and stream frame. historyd sets no send limit of its own
	// (grpc-go's is 2 GiB), so this is the bound.
	DefaultMaxResponseBytes = 4 << 20
	// DefaultMaxRenderedBytes caps one message's rendered text (--max-rendered-bytes): 1 MiB, a
	// quarter of the response budget, far above any prompt a model takes, and far below the
	// hundreds of MiB a value nested 1,000 deep renders to.
	DefaultMaxRenderedBytes = 1 << 20
	// DefaultMaxImportBytes bounds one ImportBranchStream payload (--max-import-bytes): 256 MiB, a
	// quarter of the default memory budget; the payload is held (and parsed) whole.
	DefaultMaxImportBytes = 256 << 20
	// exportChunkBytes is the data of one ExportBranchStream frame: 1 MiB, a quarter of the default
	// budget, so a frame fits whatever the client's limit down to 1 MiB plus a few bytes.
	exportChunkBytes = 1 << 20
	// responseFixedBytes is set aside for a page's fixed fields (next_page_token, head_sequence and
	// their tags) before its items are counted against the budget.
	responseFixedBytes = 256
)

// The flags that set the bounds, named in the errors (issue 11: "the flag that sets it").
const (
	flagMaxResponseBytes = "--max-response-bytes"
	flagMaxRenderedBytes = "--max-rendered-bytes"
	flagMaxImportBytes   = "--max-import-bytes"
)

var (
	// errResponseTooLarge is the sentinel of responseTooLargeError (RESOURCE_EXHAUSTED,
	// RESPONSE_TOO_LARGE; errors.go).
	errResponseTooLarge = errors.New("response too large")
	// errImportTooLarge is the sentinel of importTooLargeError (RESOURCE_EXHAUSTED,
	// IMPORT_TOO_LARGE).
	errImportTooLarge = errors.New("import too large")
)

// responseTooLargeError refuses a response over the budget: what would not fit, its size and the
// budget; ids names the branch or message involved (metadata keys branchId, messageId). atLeast
// says size is a lower bound: what was counted when the budget was passed, the call having read
// no further (ToChatMessages, ExportBranch: docs/decisions/0008).
type responseTooLargeError struct {
	what, hint  string
	size, limit int
	atLeast     bool
	ids         map[string]string
}

func (e *responseTooLargeError) Error() string {
	takes := "takes"
	if e.atLeast {
		takes = "takes at least"
	}
	return fmt.Sprintf("%v: %s %s %d bytes, %d more than the response budget of %d bytes (%s); %s",
		errResponseTooLarge, e.what, takes, e.size, e.size-e.limit, e.limit, flagMaxResponseBytes, e.hint)
}

// Unwrap returns errResponseTooLarge, whose rule gives the code and reason.
func (e *responseTooLargeError) Unwrap() error { return errResponseTooLarge }

// ErrorMetadata gives the figures, with the keys Unregister's OWNER_HOLDS_TOO_MUCH uses.
func (e *responseTooLargeError) ErrorMetadata() map[string]string {
	md := map[string]string{
		"responseBytes":    strconv.Itoa(e.size),
		"maxResponseBytes": strconv.Itoa(e.limit),
		"flag":             flagMaxResponseBytes,
	}
	for k, v := range e.ids {
		md[k] = v
	}
	return md
}

// renderTooLargeError fails a ToChatMessages whose projection holds a message rendered past the
// cap: the call fails rather than leave the message out of a prompt (issue 11).
type renderTooLargeError struct {
	branch, message uuid.UUID
	tl              *envelope.RenderTooLargeError
}

func (e *renderTooLargeError) Error() string {
	return fmt.Sprintf("message %s does not render within the render cap of %d bytes (%s; rendering stopped at %d bytes); "+
		"leave it out with order, read it with omit_rendered, or raise the cap", e.message, e.tl.Limit, flagMaxRenderedBytes, e.tl.Bytes)
}

// Unwrap returns the envelope's error, which wraps envelope.ErrRenderTooLarge (RENDER_TOO_LARGE).
func (e *renderTooLargeError) Unwrap() error { return e.tl }

// ErrorMetadata names the message and gives the figures.
func (e *renderTooLargeError) ErrorMetadata() map[string]string {
	return map[string]string{
		"branchId":         e.branch.String(),
		"messageId":        e.message.String(),
		"renderedBytes":    strconv.Itoa(e.tl.Bytes),
		"maxRenderedBytes": strconv.Itoa(e.tl.Limit),
		"flag":             flagMaxRenderedBytes,
	}
}

// importTooLargeError refuses an ImportBranchStream payload past --max-import-bytes.
type importTooLargeError struct{ size, limit int }

func (e *importTooLargeError) Error() string {
	return fmt.Sprintf("%v: the payload reached %d bytes, more than the import limit of %d bytes (%s); nothing was written",
		errImportTooLarge, e.size, e.limit, flagMaxImportBytes)
}

// Unwrap returns errImportTooLarge, whose rule gives the code and reason.
func (e *importTooLargeError) Unwrap() error { return errImportTooLarge }

// ErrorMetadata gives the figures.
func (e *importTooLargeError) ErrorMetadata() map[string]string {
	return map[string]string{"importBytes": strconv.Itoa(e.size), "maxImportBytes": strconv.Itoa(e.limit), "flag": flagMaxImportBytes}
}

// pageBudget counts the items of a response against the budget while the response is built, so a
// page is cut short (or the call refused) before anything over the budget exists.
type pageBudget struct {
	used, limit int
}

func newPageBudget(limit int) pageBudget { return pageBudget{used: responseFixedBytes, limit: limit} }

// fieldSize is what one item of encoded size n takes in a repeated field: tag, length and bytes.
func fieldSize(field protowire.Number, n int) int {
	return protowire.SizeTag(field) + protowire.SizeBytes(n)
}

// add counts an item of n bytes; false (and nothing counted) when it does not fit.
func (b *pageBudget) add(n int) bool {
	if b.used+n > b.limit {
		return false
	}
	b.used += n
	return true
}
