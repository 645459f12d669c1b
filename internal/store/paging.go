package store

import (
	"encoding/base64"
	"encoding/binary"

	"github.com/historyd/historyd/internal/envelope"
)

// pageToken is what an opaque page token holds: the query it continues and
// the next position. Positions index the append-only lists of a branch
// (entries, a view, the selected progression), so a page costs O(page);
// the epoch ties the token to the lists it indexes, and a clear (or a new
// selected progression) makes older tokens stale. It is written in a small
// binary form (not JSON), so that reading and writing one costs the same
// whatever the numbers in it.
type pageToken struct {
	Scope string // the branch's incarnation, or "branches"
	Query string // what is listed, and in which direction
	Epoch uint64 // the lists' epoch
	Next  int64  // the next position
	After string // ListBranches: the last id returned
}

// tokenVersion is the first byte of every token, so the format can change.
const tokenVersion = 1

func (t pageToken) encode() string {
	buf := make([]byte, 0, 96)
	buf = append(buf, tokenVersion)
	for _, s := range []string{t.Scope, t.Query, t.After} {
		buf = binary.AppendUvarint(buf, uint64(len(s)))
		buf = append(buf, s...)
	}
	buf = binary.AppendUvarint(buf, t.Epoch)
	buf = binary.AppendVarint(buf, t.Next)
	return base64.RawURLEncoding.EncodeToString(buf)
}

// decodePageToken reads a token and checks that it continues the same
// query of the same scope.
func decodePageToken(s, scope, query string) (pageToken, error) {
	stale := fieldErr("page_token", ErrStalePageToken, "page_token does not continue this listing")
	data, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(data) == 0 || data[0] != tokenVersion {
		return pageToken{}, stale
	}
	data = data[1:]
	var fields [3]string
	for i := range fields {
		n, k := binary.Uvarint(data)
		if k <= 0 || n > uint64(len(data)-k) {
			return pageToken{}, stale
		}
		fields[i], data = string(data[k:k+int(n)]), data[k+int(n):]
	}
	t := pageToken{Scope: fields[0], Query: fields[1], After: fields[2]}
	var k int
	if t.Epoch, k = binary.Uvarint(data); k <= 0 {
		return pageToken{}, stale
	}
	data = data[k:]
	if t.Next, k = binary.Varint(data); k <= 0 || k != len(data) {
		return pageToken{}, stale
	}
	if t.Scope != scope || t.Query != query {
		return pageToken{}, stale
	}
	return t, nil
}

// pageSize applies the paging bounds: 0 is the default, above the maximum
// is the maximum (AIP-158), negative is an error.
func pageSize(n int) (int, error) {
	switch {
	case n < 0:
		return 0, fieldErr("page_size", envelope.ErrInvalid, "must not be negative, got %d", n)
	case n == 0:
		return DefaultPageSize, nil
	case n > MaxPageSize:
		return MaxPageSize, nil
	}
	return n, nil
}

// CheckView checks the view a read names (Store.ListMessages,
// Store.LastMessage; every engine).
func CheckView(v View) error {
	if v >= numViews {
		return fieldErr("view", envelope.ErrInvalid, "unknown view %d", v)
	}
	return nil
}

// CheckList checks a ListMessages input (its page size, its view, and a
// view combined with the selected progression) and returns the size of
// the page to list (every engine).
func CheckList(in ListInput) (int, error) {
	size, err := pageSize(in.PageSize)
	if err != nil {
		return 0, err
	}
	if err := CheckView(in.View); err != nil {
		return 0, err
	}
	if in.Selected && in.View != ViewAll {
		return 0, fieldErr("view", envelope.ErrInvalid, "a view cannot be combined with the selected progression")
	}
	return size, nil
}
