package envelope

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Clone returns a copy with a new identity (ADR-0006 D1 "Clone"): the same
// class, content, embedding, participants and channel, a new id and
// created_at, and metadata.clone_from set to the source id (replacing any
// earlier clone_from, at its position).
func (m *Message) Clone() (*Message, error) {
	enc, err := m.Encode(ModePython, "")
	if err != nil {
		return nil, err
	}
	fields := enc.Delete("id").Delete("created_at").Delete("role")
	c, err := DecodeWith(fields, DecodeOptions{As: m.Kind()})
	if err != nil {
		return nil, err
	}
	c.Metadata = c.Metadata.Set("clone_from", jsonv.StringValue(m.ID.String()))
	return c, nil
}

// WithID returns a copy of m with another id (used when a store assigns
// ids, and by ForkBranch).
func (m *Message) WithID(id uuid.UUID) *Message {
	cp := m.Copy()
	cp.ID = id
	return cp
}

// Update applies LionAGI's Message.update(sender=..., recipient=...,
// **content_fields) to a copy of m (ADR-0006 D1 "Update"): sender and
// recipient change only when the given value is truthy (so neither can be
// set to None this way); content fields rebuild a typed content through
// to_dict() and from_dict(); generic content ignores them. For an
// Instruction, a new context extends the existing one unless
// handle_context is "replace" (ADR-0006 D2; LionAGI 0.27 replaces, a
// recorded "differs").
func (m *Message) Update(fields jsonv.Value) (*Message, error) {
	if fields.Kind() != jsonv.Object {
		return nil, fieldErr("", "update fields must be a JSON object, got %s", fields.Kind())
	}
	out := m.Copy()
	contentFields := make([]jsonv.Member, 0, fields.Len())
	for _, f := range fields.Members() {
		switch f.Key {
		case "sender", "recipient":
			if !f.Value.Truthy() {
				continue
			}
			s, ok := f.Value.Str()
			if !ok {
				return nil, fieldErr(f.Key, "Invalid sender or recipient: must be a string, got %s", f.Value.Kind())
			}
			if f.Key == "sender" {
				out.Sender = ParseParticipant(s)
			} else {
				out.Recipient = ParseParticipant(s)
			}
		default:
			contentFields = append(contentFields, f)
		}
	}
	if len(contentFields) == 0 || m.Kind() == KindGeneric {
		return out, nil
	}
	merged := m.Content.Dict()
	for _, f := range contentFields {
		merged = merged.Set(f.Key, f.Value)
	}
	if ic, ok := m.Content.(*InstructionContent); ok {
		merged = mergeInstructionContext(ic, merged, jsonv.ObjectValue(contentFields...))
	}
	c, err := ContentFromDict(m.Kind(), merged)
	if err != nil {
		return nil, withPrefix("content", err)
	}
	out.Content = c
	return out, nil
}

// mergeInstructionContext makes an update's context extend the existing
// prompt_context (ADR-0006 D2: handle_context="extend" appends, the
// default) instead of replacing it.
func mergeInstructionContext(ic *InstructionContent, merged, given jsonv.Value) jsonv.Value {
	ctxKey := ""
	switch {
	case given.Has("context"):
		ctxKey = "context"
	case given.Has("prompt_context"):
		ctxKey = "prompt_context"
	default:
		return merged
	}
	if h, ok := given.Get("handle_context"); ok {
		if s, _ := h.Str(); s == "replace" {
			return merged
		}
	}
	v, _ := given.Get(ctxKey)
	items := append(append([]jsonv.Value(nil), ic.PromptContext...), asList(v)...)
	return merged.Delete("prompt_context").Set("context", jsonv.ArrayValue(items...)).Delete("handle_context")
}

// WithActionResponseID returns a copy of the ActionRequest m naming response
// as its ActionResponse, set as create_action_response sets
// action_response_id: in place, the rest of the content as it was (Update
// would read it again through from_dict, which turns arguments such as []
// into {}).
func (m *Message) WithActionResponseID(response uuid.UUID) (*Message, error) {
	c, ok := m.Content.(*ActionRequestContent)
	if !ok {
		return nil, fieldErr("", "the message is a %s, not an ActionRequest", m.Kind())
	}
	cc := *c
	id := response.String()
	cc.ActionResponseID = &id
	cp := m.Copy()
	cp.Content = &cc
	return cp, nil
}
