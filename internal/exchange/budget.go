package exchange

import (
	"fmt"
	"strconv"
	"sync/atomic"

	"github.com/historyd/historyd/internal/envelope"
)

// The Exchange's byte budget (issue 11; docs/decisions/0011-exchange-byte-budget.md): every
// message held in an outbox, an inbox or a dead-letter list, and every request Send remembers,
// counts its estimated heap bytes against one limit. Send is the only call that adds mail, so it is
// the only one refused: a Send that does not fit fails with a *BudgetError and queues nothing.
// Collect moves what Send admitted (to inboxes, or to dead letters) without refusing: a broadcast
// copied into n inboxes counts n times, over-counting the heap it shares, so the charge never
// falls below what is really held. Pop, Unregister, dead-letter eviction and request expiry give
// the bytes back.

// budget counts the bytes the Exchange holds against a limit; 0 means no limit.
type budget struct {
	limit int64
	used  atomic.Int64
}

// reserve charges n bytes, or refuses them with a *BudgetError when they would take the total
// over the limit; a refused reservation charges nothing.
func (b *budget) reserve(n int64) error {
	for {
		used := b.used.Load()
		if b.limit > 0 && used+n > b.limit {
			return &BudgetError{Used: used, Budget: b.limit, Need: n}
		}
		if b.used.CompareAndSwap(used, used+n) {
			return nil
		}
	}
}

// charge adds n bytes without refusing: what Collect moves was admitted by Send.
func (b *budget) charge(n int64) {
	if n != 0 {
		b.used.Add(n)
	}
}

// release gives n bytes back.
func (b *budget) release(n int64) {
	if n != 0 {
		b.used.Add(-n)
	}
}

// BudgetError refuses a Send that would take the Exchange past its byte budget (WithByteBudget);
// nothing was queued. It unwraps to ErrBudgetExceeded and carries the figures.
type BudgetError struct {
	// Used is what the Exchange held when the Send was refused, in bytes.
	Used int64
	// Budget is the limit.
	Budget int64
	// Need is what the Send would have added: its message and, with a request id, the record.
	Need int64
}

// Error says what was exceeded, by how much, and how to make room.
func (e *BudgetError) Error() string {
	return fmt.Sprintf("the Exchange holds %d bytes of queued mail of its %d-byte budget: a message of %d bytes "+
		"would exceed it by %d; nothing was queued: collect outboxes and receive or pop inboxes to make room "+
		"(remembered Send request ids hold part of it until the request memory's window passes; the first Send "+
		"after that frees them)",
		e.Used, e.Budget, e.Need, e.Used+e.Need-e.Budget)
}

// Unwrap returns ErrBudgetExceeded.
func (e *BudgetError) Unwrap() error { return ErrBudgetExceeded }

// ErrorMetadata gives the figures under the lowerCamel keys of the gRPC ErrorInfo.
func (e *BudgetError) ErrorMetadata() map[string]string {
	return map[string]string{
		"usedBytes":    strconv.FormatInt(e.Used, 10),
		"budgetBytes":  strconv.FormatInt(e.Budget, 10),
		"messageBytes": strconv.FormatInt(e.Need, 10),
	}
}

// Heap estimates, in bytes, of what the Exchange holds per message, on the safe side (the memory
// store's estimates, internal/store/size.go, with the Exchange's own bookkeeping).
const (
	// messageOverhead covers the Message and content structs, the queue entry and the request's
	// decoding that the message keeps alive.
	messageOverhead = 512
	// requestRecordOverhead is one remembered Send request beyond its id and routing strings: the
	// record, its map entry and queue slot, a weak pointer and a digest.
	requestRecordOverhead = 256
)

// messageBytes estimates the heap bytes one held message costs.
func messageBytes(m *envelope.Message) int64 { return messageOverhead + m.HeapBytes() }
