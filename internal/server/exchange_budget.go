package server

import (
	"errors"
	"fmt"
	"maps"
	"strconv"

	"google.golang.org/protobuf/proto"
)

// The flags that set the Exchange's bounds, named in the ErrorInfo metadata key "flag" of the
// errors they cause (issue 11: every RESOURCE_EXHAUSTED names the flag that sets it).
const (
	maxResponseBytesFlag  = "--max-response-bytes"
	exchangeMaxBytesFlag  = "--exchange-max-bytes"
	exchangeMaxOutboxFlag = "--exchange-max-outbox"
	inboxMaxStreamsFlag   = "--inbox-max-streams"
)

// pageFixedBytes is what a page response takes beside its entries, set aside before they are
// counted: a next_page_token (under 100 bytes) and a count, with their tags.
const pageFixedBytes = 128

// errExchangeResponseTooLarge is the sentinel of exchangeResponseTooLargeError: RESOURCE_EXHAUSTED
// with reason RESPONSE_TOO_LARGE (errors.go).
var errExchangeResponseTooLarge = errors.New("response too large")

// exchangeResponseTooLargeError refuses an ExchangeService response (or stream frame) larger than
// the response budget: the smallest response the call could give, one message, does not fit.
// Nothing was removed.
type exchangeResponseTooLargeError struct {
	size, limit int
	messageID   string
	what        string // "PopMessage's response", "a Receive page's first message", ...
}

func (e *exchangeResponseTooLargeError) Error() string {
	msg := fmt.Sprintf("%s would be %d bytes, over the response budget of %d bytes (%s) by %d",
		e.what, e.size, e.limit, maxResponseBytesFlag, e.size-e.limit)
	if e.messageID == "" {
		return msg
	}
	return fmt.Sprintf("%s: message %s was not removed; ask with omit_rendered, or raise %s and the client's "+
		"receive limit", msg, e.messageID, maxResponseBytesFlag)
}

// Unwrap returns errExchangeResponseTooLarge, whose rule gives the code and reason.
func (e *exchangeResponseTooLargeError) Unwrap() error { return errExchangeResponseTooLarge }

// ErrorMetadata gives the figures, the flag and the message.
func (e *exchangeResponseTooLargeError) ErrorMetadata() map[string]string {
	md := map[string]string{
		"responseBytes":    strconv.Itoa(e.size),
		"maxResponseBytes": strconv.Itoa(e.limit),
		"flag":             maxResponseBytesFlag,
	}
	if e.messageID != "" {
		md["messageId"] = e.messageID
	}
	return md
}

// flagError adds the flag that sets a bound to a domain error's metadata (the domain does not know
// its flags).
type flagError struct {
	err  error
	flag string
}

func (e *flagError) Error() string { return fmt.Sprintf("%v (set by %s)", e.err, e.flag) }

// Unwrap returns the domain error.
func (e *flagError) Unwrap() error { return e.err }

// ErrorMetadata is the domain error's metadata plus "flag".
func (e *flagError) ErrorMetadata() map[string]string {
	md := map[string]string{}
	if me, ok := errors.AsType[metadataError](e.err); ok {
		maps.Copy(md, me.ErrorMetadata())
	}
	md["flag"] = e.flag
	return md
}

// messageOut is how the Exchange's reads convert a message: rendered under the server's render
// cap (--max-rendered-bytes), unless omitRendered is set.
func (s *ExchangeServer) messageOut(omitRendered bool) messageOut {
	return messageOut{maxRendered: s.maxRendered, omitRendered: omitRendered}
}

// fitPage converts items in order while their entries (in a repeated field numbered below 16) fit
// in limit bytes with pageFixedBytes set aside, and returns the converted prefix and the encoded
// size of the first entry that did not fit (0 when all did). Each item is converted once and
// measured as it is built, so a page never grows past the budget by more than one entry.
func fitPage[T any, P proto.Message](items []T, convert func(T) P, limit int) (out []P, overflow int) {
	return fitPageWith(items, convert, nil, limit)
}

// fitPageWith is fitPage where the i-th item also takes extra(i) bytes elsewhere in the response
// (Receive's lease state of a message, in a map beside the messages); extra may be nil.
func fitPageWith[T any, P proto.Message](items []T, convert func(T) P, extra func(int) int, limit int) (out []P, overflow int) {
	left := limit - pageFixedBytes
	for i, it := range items {
		p := convert(it)
		n := entryBytes(proto.Size(p))
		if extra != nil {
			n += extra(i)
		}
		if n > left {
			return out, n + pageFixedBytes
		}
		left -= n
		out = append(out, p)
	}
	return out, 0
}
