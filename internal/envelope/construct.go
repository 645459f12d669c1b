package envelope

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// messageFields are the top-level keys a Message accepts; any other is
// rejected (ADR-0001 D1: extra="forbid"). "role" is accepted and ignored
// (ADR-0006 D1).
var messageFields = map[string]bool{
	"id": true, "created_at": true, "metadata": true, "content": true, "embedding": true,
	"sender": true, "recipient": true, "channel": true, "role": true,
}

// New builds a message of class k from its constructor fields, the keyword
// arguments of LionAGI's X(**kwargs), given as a JSON object: id, created_at,
// metadata, content, embedding, sender, recipient, channel (a role is
// ignored). Absent fields take the class defaults (a new UUID, now, {},
// the class's default participants). A metadata.lion_class, when given, must
// name class k (ADR-0001 D1, "Metadata class mismatch.").
func New(k Kind, fields jsonv.Value) (*Message, error) {
	if fields.Kind() != jsonv.Object {
		return nil, fieldErr("", "message fields must be a JSON object, got %s", fields.Kind())
	}
	md, _ := fields.Get("metadata")
	meta, err := NormalizeMetadata(md)
	if err != nil {
		return nil, err
	}
	if lc, ok := meta.Get("lion_class"); ok {
		name, _ := lc.Str()
		if got, known := LookupClass(name); !known || got != k {
			return nil, &FieldError{Field: "metadata.lion_class", Msg: "Metadata class mismatch: " + lc.String() + " does not name " + k.ClassName(), Err: ErrClassMismatch}
		}
		meta = meta.Delete("lion_class")
	}
	return build(k, fields, meta)
}

// build validates every field but metadata (already normalised, without
// lion_class) and assembles the message.
func build(k Kind, fields jsonv.Value, meta jsonv.Value) (*Message, error) {
	for _, mem := range fields.Members() {
		if !messageFields[mem.Key] {
			return nil, fieldErr(mem.Key, "unknown field (extra fields are not permitted)")
		}
	}
	elem, err := buildElement(fields, meta)
	if err != nil {
		return nil, err
	}
	m := &Message{Element: elem}

	if v, ok := fields.Get("embedding"); ok {
		if m.Embedding, m.HasEmbedding, err = ParseEmbedding(v); err != nil {
			return nil, err
		}
	}

	m.Sender, m.Recipient = defaultParticipants(k)
	if v, ok := fields.Get("sender"); ok {
		if m.Sender, err = participantFromJSON("sender", v); err != nil {
			return nil, err
		}
	}
	if v, ok := fields.Get("recipient"); ok {
		if m.Recipient, err = participantFromJSON("recipient", v); err != nil {
			return nil, err
		}
	}

	if v, ok := fields.Get("channel"); ok {
		if m.Channel, err = optString("channel", v); err != nil {
			return nil, err
		}
	}

	content, hasContent := fields.Get("content")
	if !hasContent && k != KindGeneric && k != KindSystem {
		// Typed classes declare content without a default (pydantic: Field
		// required); System has a default factory.
		return nil, fieldErr("content", "field required for %s", k)
	}
	if m.Content, err = contentFromValue(k, content); err != nil {
		return nil, err
	}
	return m, nil
}

// defaultParticipants are the class defaults of sender and recipient
// (System: system -> assistant; AssistantResponse: -> user; else unset).
func defaultParticipants(k Kind) (sender, recipient Participant) {
	switch k {
	case KindSystem:
		return RoleParticipant(RoleSystem), RoleParticipant(RoleAssistant)
	case KindAssistantResponse:
		return Unset(), RoleParticipant(RoleUser)
	}
	return Unset(), Unset()
}

// NewSystem builds a System message with the given text and default
// participants (a convenience over New for Go callers).
func NewSystem(text string) *Message {
	return &Message{
		Element: Element{ID: uuid.New(), CreatedAt: nowTimestamp(), Metadata: jsonv.ObjectValue()},
		Sender:  RoleParticipant(RoleSystem), Recipient: RoleParticipant(RoleAssistant),
		Content: &SystemContent{SystemMessage: text},
	}
}

// FromResponse is AssistantResponse.from_response (ADR-0006 D2): the
// display text parsed from a raw provider response, the raw value kept in
// metadata.model_response. sender defaults to an explicit None and a falsy
// recipient to "user", as in LionAGI.
func FromResponse(response jsonv.Value, sender, recipient *Participant) (*Message, error) {
	text, raw, err := ParseAssistantResponse(response)
	if err != nil {
		return nil, err
	}
	m := &Message{
		Element:   Element{ID: uuid.New(), CreatedAt: nowTimestamp(), Metadata: jsonv.ObjectValue(jsonv.Member{Key: "model_response", Value: raw})},
		Sender:    None(),
		Recipient: RoleParticipant(RoleUser),
		Content:   &AssistantResponseContent{AssistantResponse: text},
	}
	if sender != nil {
		m.Sender = *sender
	}
	if recipient != nil && recipient.truthy() {
		m.Recipient = *recipient
	}
	return m, nil
}
