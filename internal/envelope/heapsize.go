package envelope

import "github.com/historyd/historyd/internal/envelope/jsonv"

// Heap estimates, in bytes, on the safe side, shared by the packages that charge what they hold
// to a byte budget (the memory store's --memory-budget, the Exchange's --exchange-max-bytes).
const (
	// jsonValueOverhead is one jsonv.Value (16 bytes: text or element pointer, length, kind).
	jsonValueOverhead = 16
	// jsonMemberOverhead is one object member beyond its value: the key header.
	jsonMemberOverhead = 16
)

// HeapBytes estimates the heap bytes of m's variable parts: its metadata, content values,
// embedding, participants and channel. The structs that hold them, and whatever the holder keeps
// beside them, are the caller's fixed overhead to add.
func (m *Message) HeapBytes() int64 {
	n := ValueHeapBytes(m.Metadata)
	n += ValueHeapBytes(m.Content.Dict())
	n += int64(8 * len(m.Embedding))
	n += int64(len(m.Sender.String()) + len(m.Recipient.String()))
	if m.Channel != nil {
		n += int64(len(*m.Channel))
	}
	return n
}

// ValueHeapBytes estimates the heap bytes of a JSON value.
func ValueHeapBytes(v jsonv.Value) int64 {
	switch v.Kind() {
	case jsonv.String:
		s, _ := v.Str()
		return jsonValueOverhead + int64(len(s))
	case jsonv.Number:
		return jsonValueOverhead + int64(len(v.Literal()))
	case jsonv.Array:
		n := int64(jsonValueOverhead)
		for _, e := range v.Elems() {
			n += ValueHeapBytes(e)
		}
		return n
	case jsonv.Object:
		n := int64(jsonValueOverhead)
		for _, m := range v.Members() {
			n += jsonMemberOverhead + int64(len(m.Key)) + ValueHeapBytes(m.Value)
		}
		return n
	}
	return jsonValueOverhead
}
