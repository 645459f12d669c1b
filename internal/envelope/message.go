package envelope

// Message is LionAGI's Message envelope (ADR-0006 D1): Element identity
// (ADR-0001 D1), Node's content and embedding (ADR-0001 D4), routing fields
// and a class-fixed role given by the content's Kind.
//
// A Message is a value: code that changes one builds a new one (Update,
// Clone, With...), so stores and streams can share messages without copies
// or locks.
type Message struct {
	// Element holds the identity fields: ID, CreatedAt and Metadata.
	Element
	// Embedding is the stored compatibility vector; HasEmbedding false means
	// null, true with no values means [] (ADR-0001 D4).
	Embedding    []float64
	HasEmbedding bool
	// Sender and Recipient are normalised participants (ADR-0006 D1).
	Sender    Participant
	Recipient Participant
	// Channel is optional grouping metadata; nil is null.
	Channel *string
	// Content is the class's content; its Kind is the message's class.
	Content Content
}

// Kind returns the message's class.
func (m *Message) Kind() Kind { return m.Content.Kind() }

// Role returns the class-fixed role (ADR-0006 D1: input cannot override it).
func (m *Message) Role() Role { return m.Content.Kind().Role() }

// ClassName returns the fully qualified lion_class of the message.
func (m *Message) ClassName() string { return m.Content.Kind().ClassName() }

// IsBroadcast reports recipient is None (ADR-0006 D1).
func (m *Message) IsBroadcast() bool { return m.Recipient.IsNone() }

// IsDirect reports recipient is not None, MessageRole.UNSET included
// (ADR-0006 D1: "The predicates do not validate deliverability").
func (m *Message) IsDirect() bool { return !m.Recipient.IsNone() }

// Render returns the message's rendering (ADR-0006 D1 "Rendering").
func (m *Message) Render() (Rendered, error) {
	r, err := m.Content.Render()
	if err != nil {
		return Rendered{}, renderError(err)
	}
	return r, nil
}

// ChatMsg returns the chat projection {role, content: rendered}. LionAGI
// returns None when rendering fails; historyd returns the error, which
// wraps ErrRender.
func (m *Message) ChatMsg() (ChatMessage, error) {
	r, err := m.Render()
	if err != nil {
		return ChatMessage{}, err
	}
	return ChatMessage{Role: m.Role(), Content: r}, nil
}

// renderError marks an error as a rendering failure while keeping the field
// it names.
func renderError(err error) error {
	return &renderErr{err}
}

type renderErr struct{ err error }

func (e *renderErr) Error() string { return "render failed: " + e.err.Error() }

// Unwrap returns the underlying error and ErrRender, so errors.Is finds both.
func (e *renderErr) Unwrap() []error { return []error{ErrRender, e.err} }

// Equal reports whether two messages are the same Element: ADR-0001 D1
// compares only ids.
func (m *Message) Equal(o *Message) bool { return o != nil && m.ID == o.ID }

// Copy returns a shallow copy that may be changed without touching m.
// Contents and JSON values are immutable, so sharing them is safe.
func (m *Message) Copy() *Message {
	cp := *m
	if m.Embedding != nil {
		cp.Embedding = append([]float64(nil), m.Embedding...)
	}
	return &cp
}
