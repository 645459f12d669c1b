package store

import (
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Heap estimates, in bytes, for the memory budget. They are calibrated
// against BenchmarkHeapPerMessage (runtime heap growth per stored message),
// on the safe side.
const (
	// messageOverhead covers the Message (176 bytes) and content (up to 160)
	// structs, the version record, the id map entry, the order and view
	// slots and the event's log entry (40).
	messageOverhead = 560
	// branchOverhead covers a branch's fixed state (maps, log ring header,
	// locks).
	branchOverhead = 2048
	// eventOverhead is an event that carries no message: its log entry (40
	// bytes) and the loggedEvent that entry points to (144).
	eventOverhead = 192
)

// messageSize estimates the heap bytes one stored message version holds.
func messageSize(m *envelope.Message) int64 { return messageOverhead + m.HeapBytes() }

// valueSize estimates the heap bytes of a JSON value.
func valueSize(v jsonv.Value) int64 { return envelope.ValueHeapBytes(v) }

// commitBytes estimates the heap bytes a commit holds while a subscriber
// buffers it: each event, and each message it carries (a MESSAGE_ADDED's
// one, a BRANCH_CREATED's initial messages), as the memory budget counts a
// stored message. It bounds the subscribers' buffers in bytes (Feed.Publish).
func commitBytes(c Commit) int64 {
	var n int64
	for i := range c {
		ev := &c[i]
		n += eventOverhead
		if ev.Message != nil {
			n += messageSize(ev.Message)
		}
		for _, m := range ev.Messages {
			n += messageSize(m)
		}
		n += int64(16 * len(ev.Progression))
	}
	return n
}
