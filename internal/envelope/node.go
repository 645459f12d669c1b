package envelope

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Element is LionAGI's identity envelope (ADR-0001 D1): a UUID, a creation
// time as Unix seconds, and metadata. Two Elements are equal when their ids
// are (Equal); use ID as the map key for hashing.
type Element struct {
	// ID is the identity; written canonical lowercase.
	ID uuid.UUID
	// CreatedAt is Unix seconds (a float, as LionAGI stores it).
	CreatedAt float64
	// Metadata is a JSON object in insertion order, without lion_class (the
	// discriminator is regenerated on every write, ADR-0001 D2).
	Metadata jsonv.Value
}

// Equal compares ids only (ADR-0001 D1).
func (e Element) Equal(o Element) bool { return e.ID == o.ID }

// elementFields are the constructor fields of Element.
var elementFields = map[string]bool{"id": true, "created_at": true, "metadata": true}

// NewElement builds an Element from its constructor fields (id, created_at,
// metadata); a metadata.lion_class must name Element.
func NewElement(fields jsonv.Value) (Element, error) {
	meta, err := ctorMetadata(fields, classElement)
	if err != nil {
		return Element{}, err
	}
	for _, m := range fields.Members() {
		if !elementFields[m.Key] {
			return Element{}, fieldErr(m.Key, "unknown field (extra fields are not permitted)")
		}
	}
	return buildElement(fields, meta)
}

// Encode writes {id, created_at, metadata} (lion_class added), metadata
// under dbMetaKey in db mode.
func (e Element) Encode(mode Mode, dbMetaKey string) (jsonv.Value, error) {
	return encodeElement(e, classElement, mode, dbMetaKey, nil)
}

// Node is an Element with content and a compatibility embedding (ADR-0001
// D4).
type Node struct {
	Element
	// Content is any JSON value; a serialized LionAGI message inside it is
	// validated and rendered as that message.
	Content *GenericContent
	// Embedding is null (HasEmbedding false) or a list of floats.
	Embedding    []float64
	HasEmbedding bool
}

var nodeFields = map[string]bool{"id": true, "created_at": true, "metadata": true, "content": true, "embedding": true}

// NewNode builds a Node from its constructor fields.
func NewNode(fields jsonv.Value) (*Node, error) {
	meta, err := ctorMetadata(fields, classNode)
	if err != nil {
		return nil, err
	}
	for _, m := range fields.Members() {
		if !nodeFields[m.Key] {
			return nil, fieldErr(m.Key, "unknown field (extra fields are not permitted)")
		}
	}
	elem, err := buildElement(fields, meta)
	if err != nil {
		return nil, err
	}
	n := &Node{Element: elem}
	if v, ok := fields.Get("embedding"); ok {
		if n.Embedding, n.HasEmbedding, err = ParseEmbedding(v); err != nil {
			return nil, err
		}
	}
	content, _ := fields.Get("content")
	if n.Content, err = newGenericContent(content); err != nil {
		return nil, err
	}
	return n, nil
}

// Encode writes {id, created_at, metadata, content, embedding}.
func (n *Node) Encode(mode Mode, dbMetaKey string) (jsonv.Value, error) {
	return encodeElement(n.Element, classNode, mode, dbMetaKey, []jsonv.Member{
		{Key: "content", Value: n.Content.Dict()},
		{Key: "embedding", Value: embeddingJSON(n.Embedding, n.HasEmbedding)},
	})
}

func ctorMetadata(fields jsonv.Value, class string) (jsonv.Value, error) {
	if fields.Kind() != jsonv.Object {
		return jsonv.Value{}, fieldErr("", "fields must be a JSON object, got %s", fields.Kind())
	}
	md, _ := fields.Get("metadata")
	meta, err := NormalizeMetadata(md)
	if err != nil {
		return jsonv.Value{}, err
	}
	if lc, ok := meta.Get("lion_class"); ok {
		if name, _ := lc.Str(); name != class {
			return jsonv.Value{}, &FieldError{Field: "metadata.lion_class", Msg: "Metadata class mismatch: " + lc.String(), Err: ErrClassMismatch}
		}
		meta = meta.Delete("lion_class")
	}
	return meta, nil
}

// buildElement validates id and created_at (ADR-0001 D1): an absent id is
// a new UUID4, an absent or null created_at is now.
func buildElement(fields jsonv.Value, meta jsonv.Value) (Element, error) {
	e := Element{Metadata: meta}
	if v, ok := fields.Get("id"); ok {
		s, isStr := v.Str()
		id, valid, err := ParseElementID(s)
		if !isStr || !valid {
			return Element{}, fieldErr("id", "invalid UUID %s", v.String())
		}
		if err != nil {
			return Element{}, &FieldError{Field: "id", Msg: err.Error(), Err: err}
		}
		e.ID = id
	} else {
		e.ID = uuid.New()
	}
	created, _ := fields.Get("created_at")
	var err error
	if e.CreatedAt, err = ParseCreatedAt(created); err != nil {
		return Element{}, err
	}
	return e, nil
}

func encodeElement(e Element, class string, mode Mode, dbMetaKey string, extra []jsonv.Member) (jsonv.Value, error) {
	if mode > ModeDB {
		return jsonv.Value{}, &FieldError{Field: "mode", Msg: "Unsupported mode", Err: ErrUnsupportedMode}
	}
	meta := e.Metadata
	if meta.Kind() != jsonv.Object {
		meta = jsonv.ObjectValue()
	}
	meta = meta.Set("lion_class", jsonv.StringValue(class))
	out := []jsonv.Member{
		{Key: "id", Value: jsonv.StringValue(e.ID.String())},
		{Key: "created_at", Value: jsonv.FloatValue(e.CreatedAt)},
	}
	if mode != ModeDB {
		out = append(out, jsonv.Member{Key: "metadata", Value: meta})
	}
	out = append(out, extra...)
	if mode == ModeDB {
		if dbMetaKey == "" {
			dbMetaKey = DefaultDBMetaKey
		}
		out = append(out, jsonv.Member{Key: dbMetaKey, Value: meta})
	}
	return jsonv.ObjectValue(out...), nil
}

func embeddingJSON(emb []float64, present bool) jsonv.Value {
	if !present {
		return jsonv.NullValue()
	}
	vals := make([]jsonv.Value, len(emb))
	for i, f := range emb {
		vals[i] = jsonv.FloatValue(f)
	}
	return jsonv.ArrayValue(vals...)
}
