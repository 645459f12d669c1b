package store

import (
	"context"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// What an engine outside this package needs besides the rules (rules.go)
// and the subscriptions' Feed (subscribe.go): the paging bounds and
// tokens, the field errors, the views, the LionAGI JSON of import and
// export, and the observers' call. Thin exports of what Memory uses, so
// that every engine answers alike.

// PageToken is what an opaque page token holds.
type PageToken = pageToken

// EncodePageToken writes a page token.
func EncodePageToken(t PageToken) string { return t.encode() }

// DecodePageToken reads a token and checks that it continues the same
// query of the same scope (else ErrStalePageToken).
func DecodePageToken(s, scope, query string) (PageToken, error) {
	return decodePageToken(s, scope, query)
}

// PageSize applies the paging bounds (AIP-158).
func PageSize(n int) (int, error) { return pageSize(n) }

// FieldError is an error about a request field wrapping sentinel.
func FieldError(field string, sentinel error, format string, args ...any) error {
	return fieldErr(field, sentinel, format, args...)
}

// NumViews is the number of views, ViewAll included.
const NumViews = numViews

// ViewsOf returns the views other than ViewAll that a message kind belongs
// to.
func ViewsOf(k envelope.Kind) []View { return viewsOf(k) }

// NowSeconds is a new Element's created_at.
func NowSeconds() float64 { return nowSeconds() }

// BranchMetadata normalizes a new branch's metadata (an object).
func BranchMetadata(meta jsonv.Value) (jsonv.Value, error) {
	meta, err := envelope.NormalizeMetadata(meta)
	if err != nil {
		return jsonv.Value{}, fieldErr("metadata", envelope.ErrInvalid, "invalid metadata: not a JSON object (got %s)", meta.Kind())
	}
	return meta, nil
}

// ElementID is the identity of a non-message Element a branch exports (its
// Pile and the Pile's progression).
type ElementID struct {
	ID        uuid.UUID
	CreatedAt float64
}

// Imported is a branch read from LionAGI JSON (ImportBranch).
type Imported struct {
	ID        *uuid.UUID
	CreatedAt *float64
	Metadata  jsonv.Value
	Name      *string
	User      *string
	// Messages are replayed in order through the D3 rules; Paths name each
	// one's place in the request ("data[2]").
	Messages []*envelope.Message
	Paths    []string
	Selected *Progression
	// CollRank is each message's index in the collections it came in
	// (ImportRanks).
	CollRank   map[uuid.UUID]uint64
	Pile, Prog *ElementID
}

// ParseImport reads LionAGI JSON: a Branch dict, a Pile or a list of
// messages.
func ParseImport(data jsonv.Value, metaKey string) (Imported, error) {
	im, err := parseImport(data, metaKey)
	if err != nil {
		return Imported{}, err
	}
	out := Imported{
		ID: im.id, CreatedAt: im.createdAt, Metadata: im.metadata, Name: im.name, User: im.user,
		Messages: im.messages, Paths: im.paths, Selected: im.selected, CollRank: im.collRank,
	}
	if im.pile != nil {
		out.Pile = &ElementID{im.pile.id, im.pile.createdAt}
	}
	if im.prog != nil {
		out.Prog = &ElementID{im.prog.id, im.prog.createdAt}
	}
	return out, nil
}

// ExportData is what EncodeBranch writes.
type ExportData struct {
	ID         uuid.UUID
	CreatedAt  float64
	Metadata   jsonv.Value
	Name, User *string
	Pile, Prog ElementID
	// Order is the full order; Collections the same messages by rank.
	Order, Collections []*envelope.Message
	System             *envelope.Message
	Selected           *Progression // nil when none is set
}

// EncodeBranch writes a branch as Branch.to_dict(mode) (ExportBranch).
func EncodeBranch(d ExportData, mode envelope.Mode, dbMetaKey string) (jsonv.Value, error) {
	if mode > envelope.ModeDB {
		return jsonv.Value{}, fieldErr("mode", envelope.ErrUnsupportedMode, "Unsupported mode: %d", mode)
	}
	wrap := func(ms []*envelope.Message) []*version {
		out := make([]*version, len(ms))
		for i, m := range ms {
			out[i] = &version{msg: m}
		}
		return out
	}
	src := exportSource{
		id: d.ID, createdAt: d.CreatedAt, metadata: d.Metadata, name: d.Name, user: d.User,
		pile: elementID{d.Pile.ID, d.Pile.CreatedAt}, prog: elementID{d.Prog.ID, d.Prog.CreatedAt},
		versions: wrap(d.Order), collections: wrap(d.Collections), selected: d.Selected,
	}
	if d.System != nil {
		src.system = &version{msg: d.System}
	}
	return src.encode(mode, dbMetaKey)
}

// Notify runs observers on msg after its write committed (ADR-0006 D4):
// a failure or a panic does not stop the others; all failures come back
// as one *ObserverError.
func Notify(ctx context.Context, branchID uuid.UUID, observers []Observer, msg *envelope.Message) error {
	entries := make([]observerEntry, len(observers))
	for i, o := range observers {
		entries[i] = observerEntry{fn: o}
	}
	return notify(ctx, branchID, entries, msg)
}
