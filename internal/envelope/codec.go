package envelope

import (
	"fmt"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Mode is a LionAGI serialization mode (ADR-0001 D2).
type Mode uint8

// The three dictionary modes. Python and JSON modes are identical for JSON
// content; db mode moves metadata under node_metadata (or a chosen key).
const (
	ModePython Mode = iota
	ModeJSON
	ModeDB
)

// DefaultDBMetaKey is the key db mode stores metadata under.
const DefaultDBMetaKey = "node_metadata"

// dictFields are the keys the dicts of a branch export have beside their
// metadata: a Branch's (LionAGI's Branch.to_dict also writes chat_model,
// and parse_model, logs and log_config when set, which an import of its
// export must not take for the metadata), its Pile's and Progression's,
// and a Message's.
var dictFields = map[string]bool{
	"id": true, "created_at": true, "user": true, "name": true, "messages": true, "system": true,
	"chat_model": true, "parse_model": true, "logs": true, "log_config": true,
	"collections": true, "progression": true, "strict_type": true, "order": true,
	"content": true, "embedding": true, "sender": true, "recipient": true, "channel": true, "role": true,
}

// CheckDBMetaKey refuses a custom db-mode metadata key that names one of
// those fields: written, the dict would have the key twice (LionAGI's
// to_dict overwrites the field with the metadata, losing it); read, a field
// would be taken for the metadata. An empty key (the default) is valid.
func CheckDBMetaKey(key string) error {
	if dictFields[key] {
		return fmt.Errorf("%w: %q names a field of the exported dicts; choose another key (default %s)", ErrInvalid, key, DefaultDBMetaKey)
	}
	return nil
}

// ParseMode reads "python", "json" or "db"; anything else is LionAGI's
// "Unsupported mode: ..." error.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "python", "":
		return ModePython, nil
	case "json":
		return ModeJSON, nil
	case "db":
		return ModeDB, nil
	}
	return 0, &FieldError{Field: "mode", Msg: "Unsupported mode: " + s, Err: ErrUnsupportedMode}
}

// String returns the mode's LionAGI name.
func (m Mode) String() string {
	switch m {
	case ModeJSON:
		return "json"
	case ModeDB:
		return "db"
	}
	return "python"
}

// Encode writes the message as LionAGI's to_dict(mode) does: id, created_at,
// metadata (with lion_class added at its end), content, embedding, sender,
// recipient, channel, role. In db mode metadata moves to dbMetaKey (default
// node_metadata) at the end of the object.
func (m *Message) Encode(mode Mode, dbMetaKey string) (jsonv.Value, error) {
	return m.encode(mode, dbMetaKey, false)
}

// storedDicter is content whose to_dict leaves out a value that from_dict
// would not read back as itself (a None LionAGI keeps, which to_dict drops
// and from_dict then replaces with a default). storedDict is the content
// dict Decode reads back as the same content.
type storedDicter interface {
	storedDict() jsonv.Value
}

func (m *Message) encode(mode Mode, dbMetaKey string, stored bool) (jsonv.Value, error) {
	if mode > ModeDB {
		return jsonv.Value{}, &FieldError{Field: "mode", Msg: "Unsupported mode: " + mode.String(), Err: ErrUnsupportedMode}
	}
	meta := m.Metadata
	if meta.Kind() != jsonv.Object {
		meta = jsonv.ObjectValue()
	}
	meta = meta.Set("lion_class", jsonv.StringValue(m.ClassName()))

	out := make([]jsonv.Member, 0, 9)
	add := func(k string, v jsonv.Value) { out = append(out, jsonv.Member{Key: k, Value: v}) }
	add("id", jsonv.StringValue(m.ID.String()))
	add("created_at", jsonv.FloatValue(m.CreatedAt))
	if mode != ModeDB {
		add("metadata", meta)
	}
	if sd, ok := m.Content.(storedDicter); ok && stored {
		add("content", sd.storedDict())
	} else {
		add("content", m.Content.Dict())
	}
	add("embedding", m.embeddingJSON())
	add("sender", m.Sender.JSON())
	add("recipient", m.Recipient.JSON())
	if m.Channel != nil {
		add("channel", jsonv.StringValue(*m.Channel))
	} else {
		add("channel", jsonv.NullValue())
	}
	add("role", jsonv.StringValue(string(m.Role())))
	if mode == ModeDB {
		if dbMetaKey == "" {
			dbMetaKey = DefaultDBMetaKey
		}
		add(dbMetaKey, meta)
	}
	return jsonv.ObjectValue(out...), nil
}

// MarshalJSON writes the message as the stores keep it: in json mode
// (LionAGI's to_json()), except where LionAGI's to_dict leaves out a value
// from_dict would not read back as itself (a null assistant_response or
// system_message, which from_dict would turn into the defaults): there the
// content keeps a form Decode reads back as the same content. So
// Decode(MarshalJSON()) is always the message again, as a store read must
// be; Encode is what exports write, LionAGI's bytes.
func (m *Message) MarshalJSON() ([]byte, error) {
	v, err := m.encode(ModeJSON, "", true)
	if err != nil {
		return nil, err
	}
	return jsonv.Marshal(v), nil
}

func (m *Message) embeddingJSON() jsonv.Value { return embeddingJSON(m.Embedding, m.HasEmbedding) }

// DecodeOptions tunes Decode.
type DecodeOptions struct {
	// As is the class being decoded into when the payload names none
	// (LionAGI's X.from_dict); the payload's own lion_class always wins.
	// The zero value is the base Message.
	As Kind
	// MetaKey is a custom db-mode metadata key to read (besides
	// node_metadata and metadata).
	MetaKey string
}

// Decode rebuilds a message from a LionAGI message dict in any mode
// (Message.from_dict): metadata is read from node_metadata first, then
// metadata; its lion_class picks the class from the closed registry (an
// unknown or malformed discriminator is an error naming it); a role is
// ignored; unknown top-level fields are rejected. v is never changed.
func Decode(v jsonv.Value) (*Message, error) { return DecodeWith(v, DecodeOptions{}) }

// DecodeJSON is Decode for JSON text (LionAGI's from_json).
func DecodeJSON(data []byte) (*Message, error) {
	v, err := jsonv.Parse(data)
	if err != nil {
		return nil, &FieldError{Msg: err.Error(), Err: ErrInvalid}
	}
	return Decode(v)
}

// DecodeWith is Decode with options.
func DecodeWith(v jsonv.Value, opt DecodeOptions) (*Message, error) {
	if v.Kind() != jsonv.Object {
		return nil, fieldErr("", "a message must be a JSON object, got %s", v.Kind())
	}
	fields := v
	var md jsonv.Value
	metaField := "metadata"
	switch {
	case opt.MetaKey != "" && v.Has(opt.MetaKey):
		md, _ = v.Get(opt.MetaKey)
		metaField = opt.MetaKey
		fields = fields.Delete(opt.MetaKey).Delete("metadata")
	case v.Has("node_metadata"):
		// ADR-0001 D2: "When both metadata keys are present, node_metadata is
		// selected first."
		md, _ = v.Get("node_metadata")
		metaField = "node_metadata"
		fields = fields.Delete("node_metadata").Delete("metadata")
	default:
		md, _ = v.Get("metadata")
		fields = fields.Delete("metadata")
	}
	meta, err := NormalizeMetadata(md)
	if err != nil {
		return nil, withPrefix(metaField, stripField(err))
	}
	kind := opt.As
	if lc, ok := meta.Get("lion_class"); ok {
		name, isStr := lc.Str()
		if !isStr {
			return nil, &FieldError{Field: metaField + ".lion_class", Msg: "lion_class must be a string, got " + lc.Kind().String(), Err: ErrUnknownClass}
		}
		k, known := LookupClass(name)
		switch {
		case known:
			kind = k
		case isElementClass(name):
			return nil, &FieldError{Field: metaField + ".lion_class", Msg: "lion_class " + lc.String() + " is an " + shortClassName(name) + ", not a message", Err: ErrUnknownClass}
		default:
			return nil, &FieldError{Field: metaField + ".lion_class", Msg: "unknown lion_class " + lc.String() + " (historyd reads only the LionAGI message classes)", Err: ErrUnknownClass}
		}
		meta = meta.Delete("lion_class")
	}
	return build(kind, fields, meta)
}

// stripField drops the field of a *FieldError so a caller can re-prefix it.
func stripField(err error) error {
	if fe, ok := err.(*FieldError); ok {
		cp := *fe
		cp.Field = ""
		return &cp
	}
	return err
}
