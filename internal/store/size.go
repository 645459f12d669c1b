package store

import (
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Heap estimates, in bytes, for the memory budget. They are calibrated
// against BenchmarkHeapPerMessage (runtime heap growth per stored message),
// on the safe side.
const (
	// messageOverhead covers the Message (192 bytes) and content (up to 208)
	// structs, the version record, the id map entry, the order and view
	// slots and the event.
	messageOverhead = 560
	// valueOverhead is one jsonv.Value (32 bytes: kind, length, string
	// header, element pointer).
	valueOverhead = 32
	// memberOverhead is one object member beyond its value: the key header.
	memberOverhead = 16
	// branchOverhead covers a branch's fixed state (maps, log ring header,
	// locks).
	branchOverhead = 2048
	// eventOverhead is an event that carries no message.
	eventOverhead = 160
)

// messageSize estimates the heap bytes one stored message version holds.
func messageSize(m *envelope.Message) int64 {
	n := int64(messageOverhead)
	n += valueSize(m.Metadata)
	n += valueSize(m.Content.Dict())
	n += int64(8 * len(m.Embedding))
	n += int64(len(m.Sender.String()) + len(m.Recipient.String()))
	if m.Channel != nil {
		n += int64(len(*m.Channel))
	}
	return n
}

// valueSize estimates the heap bytes of a JSON value.
func valueSize(v jsonv.Value) int64 {
	switch v.Kind() {
	case jsonv.String:
		s, _ := v.Str()
		return valueOverhead + int64(len(s))
	case jsonv.Number:
		return valueOverhead + int64(len(v.Literal()))
	case jsonv.Array:
		n := int64(valueOverhead)
		for _, e := range v.Elems() {
			n += valueSize(e)
		}
		return n
	case jsonv.Object:
		n := int64(valueOverhead)
		for _, m := range v.Members() {
			n += memberOverhead + int64(len(m.Key)) + valueSize(m.Value)
		}
		return n
	}
	return valueOverhead
}
