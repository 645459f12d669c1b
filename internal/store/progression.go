package store

import (
	"slices"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Progression is LionAGI's Progression (ADR-0006 D3, P4): an ordered list of
// ids with its own Element identity. A branch's selected progression is
// one, and Branch and Pile JSON carry them. The zero value is an empty
// progression with the zero id; use NewProgression for a fresh identity.
type Progression struct {
	ID        uuid.UUID
	CreatedAt float64
	// Metadata is the Element metadata (without lion_class).
	Metadata jsonv.Value
	// Name is the progression's name; nil is None.
	Name  *string
	Order []uuid.UUID
}

// NewProgression returns a progression with a new id, created now.
func NewProgression(order []uuid.UUID, name *string) *Progression {
	return &Progression{ID: uuid.New(), CreatedAt: nowSeconds(), Metadata: jsonv.ObjectValue(), Name: name, Order: order}
}

// Clone returns a deep copy.
func (p *Progression) Clone() *Progression {
	cp := *p
	cp.Order = slices.Clone(p.Order)
	return &cp
}

// Encode writes the progression as LionAGI's to_dict(mode): {id,
// created_at, metadata, order, name}, metadata under dbMetaKey (default
// node_metadata) at the end in db mode.
func (p *Progression) Encode(mode envelope.Mode, dbMetaKey string) jsonv.Value {
	return encodeElement(p.ID, p.CreatedAt, p.Metadata, envelope.ClassProgression, mode, dbMetaKey,
		jsonv.Member{Key: "order", Value: p.orderJSON()},
		jsonv.Member{Key: "name", Value: p.nameJSON()})
}

// EncodeNested writes the progression as it is written inside another
// Element's metadata (a Branch's current_progression): pydantic's dump of a
// nested model, {id, created_at, metadata, order, name}, the same in every
// mode, its metadata as it is (no lion_class, never under a db-mode key;
// lionagi/protocols/generic/element.py: to_dict dumps the metadata dict
// with the model's serializer, which does not call the nested to_dict).
func (p *Progression) EncodeNested() jsonv.Value {
	meta := p.Metadata
	if meta.Kind() != jsonv.Object {
		meta = jsonv.ObjectValue()
	}
	return jsonv.ObjectValue(
		jsonv.Member{Key: "id", Value: jsonv.StringValue(p.ID.String())},
		jsonv.Member{Key: "created_at", Value: jsonv.FloatValue(p.CreatedAt)},
		jsonv.Member{Key: "metadata", Value: meta},
		jsonv.Member{Key: "order", Value: p.orderJSON()},
		jsonv.Member{Key: "name", Value: p.nameJSON()})
}

func (p *Progression) orderJSON() jsonv.Value {
	order := make([]jsonv.Value, len(p.Order))
	for i, id := range p.Order {
		order[i] = jsonv.StringValue(id.String())
	}
	return jsonv.ArrayValue(order...)
}

func (p *Progression) nameJSON() jsonv.Value {
	if p.Name == nil {
		return jsonv.NullValue()
	}
	return jsonv.StringValue(*p.Name)
}

// ParseProgression reads a progression dict in any mode (Progression.
// from_dict): order is validated as LionAGI's validator does; a missing id
// or created_at is made new. A bare list of ids is accepted too.
func ParseProgression(v jsonv.Value) (*Progression, error) { return parseProgression(v, "") }

// parseProgression is ParseProgression reading metadata from a custom
// db-mode key first (decodeElement).
func parseProgression(v jsonv.Value, metaKey string) (*Progression, error) {
	if v.Kind() == jsonv.Array {
		order, err := envelope.ValidateOrder(v)
		if err != nil {
			return nil, err
		}
		return NewProgression(order, nil), nil
	}
	if v.Kind() != jsonv.Object {
		return nil, fieldErr("", envelope.ErrInvalid, "a progression must be an object or a list, got %s", v.Kind())
	}
	p := &Progression{}
	var err error
	if p.ID, p.CreatedAt, p.Metadata, err = decodeElement(v, envelope.ClassProgression, metaKey); err != nil {
		return nil, err
	}
	ov, _ := v.Get("order")
	if p.Order, err = envelope.ValidateOrder(ov); err != nil {
		return nil, err
	}
	if nv, ok := v.Get("name"); ok && !nv.IsNull() {
		s, isStr := nv.Str()
		if !isStr {
			return nil, fieldErr("name", envelope.ErrInvalid, "must be a string or null, got %s", nv.Kind())
		}
		p.Name = &s
	}
	return p, nil
}
