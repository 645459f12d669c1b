package store

import (
	"cmp"
	"errors"
	"slices"
	"strconv"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// imported is a branch read from LionAGI JSON.
type imported struct {
	metaKey   string // a custom db-mode metadata key, read first
	id        *uuid.UUID
	createdAt *float64
	metadata  jsonv.Value
	name      *string
	user      *string
	messages  []*envelope.Message // replayed in order through the D3 rules
	paths     []string            // each message's place in the request ("data[2]")
	selected  *Progression
	// collRank is each message's index in the collections it came in
	// (a Pile's dict order), which it keeps as its rank (issue 13 item 1).
	collRank map[uuid.UUID]uint64
	pile     *elementID
	prog     *elementID
}

func (im *imported) add(m *envelope.Message, path string) {
	im.messages = append(im.messages, m)
	im.paths = append(im.paths, path)
}

// ImportMaxDepth bounds the nesting of an ImportBranch document. Every
// value a write accepts nests at most jsonv.MaxDepth levels from its own
// root; an export puts each such value at most exportWrapDepth levels below
// the document's top (Branch, messages, collections, a message, content or
// metadata, a list such as prompt_context), so the document limit is the
// value limit plus that: whatever any path in accepted, export then import
// accepts again, and the values inside an import are held to the same
// jsonv.MaxDepth (checked in ImportBranch) as AddMessage's (issue 13 item 7).
const ImportMaxDepth = jsonv.MaxDepth + exportWrapDepth

// exportWrapDepth is how deep an export nests a message's values:
// data.messages.collections[i] is 3 levels down, and a value is at most
// messageValueDepth below its message.
const exportWrapDepth = 3 + messageValueDepth

// messageValueDepth is how deep a message dict nests a value below it:
// content.prompt_context[j] is 3 levels down. A message whose values each
// nest at most jsonv.MaxDepth (what every write accepts) nests at most
// jsonv.MaxDepth+messageValueDepth.
const messageValueDepth = 3

// checkMessageDepth holds an imported message dict to the nesting every
// write path accepts (issue 13 item 7).
func checkMessageDepth(msg jsonv.Value, field string) error {
	if d := depth(msg); d > jsonv.MaxDepth+messageValueDepth {
		return fieldErr(field, envelope.ErrInvalid, "nesting deeper than %d levels inside a message", jsonv.MaxDepth)
	}
	return nil
}

// depth is how many levels v nests below itself (a scalar is 0). The parser
// bounds it, so the recursion is bounded.
func depth(v jsonv.Value) int {
	d := 0
	switch v.Kind() {
	case jsonv.Array:
		for _, e := range v.Elems() {
			d = max(d, 1+depth(e))
		}
	case jsonv.Object:
		for _, m := range v.Members() {
			d = max(d, 1+depth(m.Value))
		}
	}
	return d
}

// parseImport reads the three shapes ImportBranch accepts (
// docs/design.md#branches): an object with `messages` is a Branch.to_dict, an object
// with `collections` is a Pile.to_dict, an array is a list of message
// dicts; any mode (metadata or node_metadata). Errors name the field from
// "data". metaKey is a custom db-mode metadata key (ExportBranch's
// dbMetaKey), read before node_metadata and metadata.
func parseImport(data jsonv.Value, metaKey string) (imported, error) {
	out := imported{metaKey: metaKey}
	switch {
	case data.Kind() == jsonv.Array:
		return out, out.addList(data, "data")
	case data.Kind() == jsonv.Object && data.Has("messages"):
		return out, out.addBranchDict(data)
	case data.Kind() == jsonv.Object && data.Has("collections"):
		return out, out.addPile(data, "data")
	}
	return imported{}, fieldErr("data", envelope.ErrInvalid, "not a LionAGI Branch (an object with messages), Pile (an object with collections) or list of messages; got %s", data.Kind())
}

// addList reads a list of message dicts at field. ADR-0006 D3
// "Initialization": dictionaries are reconstructed through
// Message.from_dict; non-message entries are ignored.
func (im *imported) addList(v jsonv.Value, field string) error {
	for i, e := range v.Elems() {
		if e.Kind() != jsonv.Object {
			continue
		}
		path := field + "[" + strconv.Itoa(i) + "]"
		if err := checkMessageDepth(e, path); err != nil {
			return err
		}
		m, err := envelope.DecodeWith(e, envelope.DecodeOptions{MetaKey: im.metaKey})
		if err != nil {
			return prefixErr(path, err)
		}
		im.add(m, path)
	}
	return nil
}

// addBranchDict reads Branch.to_dict: the Element fields, user, name, the
// messages Pile (or list), and metadata.current_progression as the
// selected progression. `system` is ignored, as Branch.from_dict does when
// the messages (which hold the system) are present.
func (im *imported) addBranchDict(data jsonv.Value) error {
	id, created, meta, err := decodeElement(data, envelope.ClassBranch, im.metaKey)
	if err != nil {
		return prefixErr("data", err)
	}
	im.id, im.createdAt, im.metadata = &id, &created, meta
	for _, f := range []struct {
		key string
		dst **string
	}{{"user", &im.user}, {"name", &im.name}} {
		v, ok := data.Get(f.key)
		if !ok || v.IsNull() {
			continue
		}
		s, isStr := v.Str()
		if !isStr {
			return fieldErr("data."+f.key, envelope.ErrInvalid, "must be a string or null, got %s", v.Kind())
		}
		*f.dst = &s
	}
	if err := CheckBranchTexts("data.", im.name, im.user); err != nil {
		return err
	}
	msgs, _ := data.Get("messages")
	switch msgs.Kind() {
	case jsonv.Object:
		err = im.addPile(msgs, "data.messages")
	case jsonv.Array:
		err = im.addList(msgs, "data.messages")
	case jsonv.Null:
	default:
		err = fieldErr("data.messages", envelope.ErrInvalid, "must be a Pile object, got %s", msgs.Kind())
	}
	if err != nil {
		return err
	}
	if cp, ok := meta.Get("current_progression"); ok {
		im.metadata = meta.Delete("current_progression")
		if !cp.IsNull() {
			if im.selected, err = parseProgression(cp, im.metaKey); err != nil {
				return prefixErr("data.metadata.current_progression", err)
			}
		}
	}
	return nil
}

// addPile reads Pile.to_dict at field: its collections (message dicts) in
// the order of its progression, when it has one, and the identities of the
// Pile and its progression.
func (im *imported) addPile(v jsonv.Value, field string) error {
	if v.Has("id") {
		id, created, _, err := decodeElement(v, envelope.ClassPile, im.metaKey)
		if err != nil {
			return prefixErr(field, err)
		}
		im.pile = &elementID{id, created}
	}
	coll, _ := v.Get("collections")
	if coll.Kind() != jsonv.Array && !coll.IsNull() {
		return fieldErr(field+".collections", envelope.ErrInvalid, "must be a list, got %s", coll.Kind())
	}
	list := imported{metaKey: im.metaKey}
	byID := make(map[uuid.UUID]int, coll.Len())
	for i, e := range coll.Elems() {
		f := field + ".collections[" + strconv.Itoa(i) + "]"
		if e.Kind() != jsonv.Object {
			return fieldErr(f, envelope.ErrInvalid, "must be a message object, got %s", e.Kind())
		}
		if err := checkMessageDepth(e, f); err != nil {
			return err
		}
		m, err := envelope.DecodeWith(e, envelope.DecodeOptions{MetaKey: im.metaKey})
		if err != nil {
			return prefixErr(f, err)
		}
		if _, seen := byID[m.ID]; !seen {
			if im.collRank == nil {
				im.collRank = map[uuid.UUID]uint64{}
			}
			im.collRank[m.ID] = uint64(i) // a dict keeps a repeated key's first place
		}
		byID[m.ID] = len(list.messages)
		list.add(m, f)
	}
	pv, ok := v.Get("progression")
	if !ok || pv.IsNull() {
		im.messages, im.paths = append(im.messages, list.messages...), append(im.paths, list.paths...)
		return nil
	}
	p, err := parseProgression(pv, im.metaKey)
	if err != nil {
		return prefixErr(field+".progression", err)
	}
	if pv.Has("id") {
		im.prog = &elementID{p.ID, p.CreatedAt}
	}
	seen := make(map[uuid.UUID]bool, len(p.Order))
	for i, id := range p.Order {
		j, ok := byID[id]
		if !ok || seen[id] {
			return fieldErr(field+".progression.order["+strconv.Itoa(i)+"]", ErrInvalidProgression,
				"%s is not a message of the pile's collections, or appears twice", id)
		}
		seen[id] = true
		im.add(list.messages[j], list.paths[j])
	}
	if len(seen) != len(byID) {
		return fieldErr(field+".progression.order", ErrInvalidProgression, "the progression does not order every message of the collections")
	}
	return nil
}

// prefixErr puts a path in front of the field a validation error names.
func prefixErr(prefix string, err error) error {
	var fe *envelope.FieldError
	if !errors.As(err, &fe) {
		return &envelope.FieldError{Field: prefix, Msg: err.Error(), Err: err}
	}
	cp := *fe
	switch {
	case cp.Field == "":
		cp.Field = prefix
	case cp.Field[0] == '[':
		cp.Field = prefix + cp.Field
	default:
		cp.Field = prefix + "." + cp.Field
	}
	return &cp
}

// exportSource is what ExportBranch reads under the branch's read lock;
// the encoding runs after the lock is released (messages never change).
type exportSource struct {
	id         uuid.UUID
	createdAt  float64
	metadata   jsonv.Value
	name, user *string
	pile, prog elementID
	versions   []*version // the full order
	system     *version
	// collections are versions in collections order (by rank).
	collections []*version
	selected    *Progression // a copy; nil when none is set
	head        uint64
}

// exportSource reads what encode writes. Branch read lock held.
func (b *branch) exportSource() exportSource {
	src := exportSource{
		id: b.id, createdAt: b.createdAt, metadata: b.metadata, name: b.name, user: b.user,
		pile: b.pile, prog: b.prog, system: b.system, head: b.head, versions: b.versions(b.order()),
	}
	src.collections = slices.Clone(src.versions)
	slices.SortStableFunc(src.collections, func(x, y *version) int { return cmp.Compare(x.rank, y.rank) })
	if b.selected != nil {
		src.selected = b.selected.Clone()
	}
	return src
}

// encode writes the branch as Branch.to_dict(mode) (docs/design.md#branches):
// {id, created_at, metadata (with current_progression when a selected
// progression is set, and lion_class), user, name, messages: the Pile
// with its progression (encodePile: a literal when there are none),
// system}; no chat_model (historyd has none).
//
// In db mode the Branch's metadata key comes after name, before messages
// and system: Branch.to_dict sets those on the dict Element.to_dict made,
// whose db mode had already moved the metadata to its end
// (lionagi/session/branch.py: to_dict; protocols/generic/element.py:
// to_dict).
//
// In db mode only the top of each to_dict(mode="db") call is renamed, as
// LionAGI 0.27 does (Branch.to_dict and Pile's field serializers, commit
// 669ea9b5): the Branch's metadata goes under dbMetaKey; the Pile and the
// system are written by to_dict(mode) without the key, so under
// node_metadata; the Pile's collections and its progression are written by
// a plain to_dict(), so under metadata (issue 13 item 6).
func (s exportSource) encode(mode envelope.Mode, dbMetaKey string) (jsonv.Value, error) {
	pile, err := s.encodePile(mode)
	if err != nil {
		return jsonv.Value{}, err
	}
	meta := s.metadata
	if s.selected != nil {
		meta = meta.Set("current_progression", s.selected.EncodeNested())
	}
	// Element.to_dict first (its db-mode metadata key after name), then
	// messages and system set on it (lionagi/session/branch.py: to_dict).
	out := encodeElement(s.id, s.createdAt, meta, envelope.ClassBranch, mode, dbMetaKey,
		jsonv.Member{Key: "user", Value: optText(s.user)},
		jsonv.Member{Key: "name", Value: optText(s.name)})
	out = out.Set("messages", pile)
	if s.system != nil {
		sys, err := s.system.msg.Encode(mode, "")
		if err != nil {
			return jsonv.Value{}, err
		}
		out = out.Set("system", sys)
	}
	return out, nil
}

// emptyPile is what Branch.to_dict writes for messages when the branch has
// none, in every mode, in place of the Pile's to_dict
// (lionagi/session/branch.py: to_dict): {"collections": [], "progression":
// {"order": []}}.
func emptyPile() jsonv.Value {
	return jsonv.ObjectValue(
		jsonv.Member{Key: "collections", Value: jsonv.ArrayValue()},
		jsonv.Member{Key: "progression", Value: jsonv.ObjectValue(jsonv.Member{Key: "order", Value: jsonv.ArrayValue()})})
}

// encodePile writes the branch's messages as Branch.to_dict does: the
// Pile's to_dict(mode), or emptyPile when the order is empty (the Pile is
// falsy: Pile.__bool__ is a non-empty progression).
func (s exportSource) encodePile(mode envelope.Mode) (jsonv.Value, error) {
	if len(s.versions) == 0 {
		return emptyPile(), nil
	}
	inner := collectionsMode(mode) // collections and the Pile's progression
	coll := make([]jsonv.Value, len(s.collections))
	order := make([]uuid.UUID, len(s.versions))
	for i, v := range s.collections {
		enc, err := v.msg.Encode(inner, "")
		if err != nil {
			return jsonv.Value{}, err
		}
		coll[i] = enc
	}
	for i, v := range s.versions {
		order[i] = v.msg.ID
	}
	prog := Progression{ID: s.prog.id, CreatedAt: s.prog.createdAt, Metadata: jsonv.ObjectValue(), Order: order}
	return encodeElement(s.pile.id, s.pile.createdAt, jsonv.ObjectValue(), envelope.ClassPile, mode, "",
		jsonv.Member{Key: "collections", Value: jsonv.ArrayValue(coll...)},
		jsonv.Member{Key: "progression", Value: prog.Encode(inner, "")},
		jsonv.Member{Key: "strict_type", Value: jsonv.BoolValue(false)}), nil
}

// collectionsMode is the mode encode writes the Pile's collections and
// progression in: a plain to_dict() in db mode, as LionAGI's do.
func collectionsMode(mode envelope.Mode) envelope.Mode {
	if mode == envelope.ModeDB {
		return envelope.ModeJSON
	}
	return mode
}

// ExportedLen is the bytes m takes in ExportBranch's text in mode: its
// entry in the Pile's collections, where every message is once. The text
// holds more (the progression's ids, the system again, the branch's own
// fields), so a sum of these over a branch's messages is a lower bound of
// its export's size, which a caller can count as the store reads
// (ExportInput.Each) and refuse at without building the export.
func ExportedLen(m *envelope.Message, mode envelope.Mode) (int, error) {
	v, err := m.Encode(collectionsMode(mode), "")
	if err != nil {
		return 0, err
	}
	return jsonv.EncodedLen(v), nil
}

func optText(s *string) jsonv.Value {
	if s == nil {
		return jsonv.NullValue()
	}
	return jsonv.StringValue(*s)
}
