package store

import (
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// nowSeconds is the current time as LionAGI stores created_at: Unix seconds
// at microsecond precision.
func nowSeconds() float64 { return float64(time.Now().UnixMicro()) / 1e6 }

// encodeElement writes a non-message Element (Branch, Pile, Progression) as
// LionAGI's to_dict does: id, created_at, metadata with lion_class last,
// then the class's own fields; in db mode the metadata moves under
// dbMetaKey (default node_metadata) at the end.
func encodeElement(id uuid.UUID, createdAt float64, meta jsonv.Value, class string, mode envelope.Mode, dbMetaKey string, fields ...jsonv.Member) jsonv.Value {
	if meta.Kind() != jsonv.Object {
		meta = jsonv.ObjectValue()
	}
	meta = meta.Set("lion_class", jsonv.StringValue(class))
	out := make([]jsonv.Member, 0, len(fields)+3)
	out = append(out,
		jsonv.Member{Key: "id", Value: jsonv.StringValue(id.String())},
		jsonv.Member{Key: "created_at", Value: jsonv.FloatValue(createdAt)})
	if mode != envelope.ModeDB {
		out = append(out, jsonv.Member{Key: "metadata", Value: meta})
	}
	out = append(out, fields...)
	if mode == envelope.ModeDB {
		if dbMetaKey == "" {
			dbMetaKey = envelope.DefaultDBMetaKey
		}
		out = append(out, jsonv.Member{Key: dbMetaKey, Value: meta})
	}
	return jsonv.ObjectValue(out...)
}

// decodeElement reads the Element fields of a non-message Element dict in
// any mode: id (absent: a new one), created_at (absent: now), metadata from
// metaKey (a custom db-mode key, when not empty), else node_metadata, else
// metadata (falsy: {}; any other non-object is an error), whose
// lion_class, when present, must name class (its full name or its short
// name).
func decodeElement(v jsonv.Value, class, metaKey string) (uuid.UUID, float64, jsonv.Value, error) {
	id := uuid.New()
	if iv, ok := v.Get("id"); ok {
		s, isStr := iv.Str()
		parsed, valid, err := envelope.ParseElementID(s)
		if !isStr || !valid {
			return uuid.UUID{}, 0, jsonv.Value{}, fieldErr("id", envelope.ErrInvalid, "invalid UUID %s", iv)
		}
		if err != nil {
			return uuid.UUID{}, 0, jsonv.Value{}, &envelope.FieldError{Field: "id", Msg: err.Error(), Err: err}
		}
		id = parsed
	}
	created := nowSeconds()
	if cv, ok := v.Get("created_at"); ok && !cv.IsNull() {
		f, err := envelope.ParseCreatedAt(cv)
		if err != nil {
			return uuid.UUID{}, 0, jsonv.Value{}, err
		}
		created = f
	}
	field := "metadata"
	md, _ := v.Get("metadata")
	for _, key := range []string{envelope.DefaultDBMetaKey, metaKey} {
		if key == "" {
			continue
		}
		if nm, ok := v.Get(key); ok {
			field, md = key, nm
		}
	}
	meta, err := envelope.NormalizeMetadata(md)
	if err != nil {
		return uuid.UUID{}, 0, jsonv.Value{}, fieldErr(field, envelope.ErrInvalid, "invalid metadata: not a JSON object (got %s)", md.Kind())
	}
	if lc, ok := meta.Get("lion_class"); ok {
		name, _ := lc.Str()
		if name != class && name != class[strings.LastIndexByte(class, '.')+1:] {
			return uuid.UUID{}, 0, jsonv.Value{}, fieldErr(field+".lion_class", envelope.ErrClassMismatch, "lion_class %s is not %s", lc, class)
		}
		meta = meta.Delete("lion_class")
	}
	return id, created, meta, nil
}
