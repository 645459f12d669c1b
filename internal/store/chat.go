package store

import "github.com/historyd/historyd/internal/envelope"

// ChatSink is where an engine's ToChatMessages puts the messages it reads,
// in order: each goes to the input's Each, counted from 0, as it is read,
// or is kept for the result when there is no Each. Every engine reads
// through one, so that the rule of ChatInput.Each is written once.
type ChatSink struct {
	in   ChatInput
	n    int
	msgs []*envelope.Message
}

// NewChatSink returns the sink of a ToChatMessages call of in.
func NewChatSink(in ChatInput) *ChatSink { return &ChatSink{in: in} }

// Reset empties the sink for a read run again (a retried transaction):
// Each is handed the projection from 0 again.
func (c *ChatSink) Reset() { c.n, c.msgs = 0, nil }

// Take hands m to Each, whose error ends the read and is the call's, or
// keeps it.
func (c *ChatSink) Take(m *envelope.Message) error {
	if c.in.Each == nil {
		c.msgs = append(c.msgs, m)
		return nil
	}
	c.n++
	return c.in.Each(c.n-1, m)
}

// Result is the call's result at head: the messages kept, rendered unless
// the input says Unrendered (none with Each, which had them all).
func (c *ChatSink) Result(head uint64) ChatResult {
	out := ChatResult{Head: head}
	if c.in.Each != nil {
		return out
	}
	out.Entries = make([]ChatEntry, len(c.msgs))
	for i, m := range c.msgs {
		out.Entries[i] = ChatEntry{MessageID: m.ID, Message: m}
		if !c.in.Unrendered {
			out.Entries[i].Chat, out.Entries[i].Err = m.ChatMsg()
		}
	}
	return out
}
