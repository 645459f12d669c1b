package store

import (
	"encoding/base64"
	"encoding/json"

	"github.com/historyd/historyd/internal/envelope"
)

// pageToken is what an opaque page token holds: the query it continues and
// the next position. Positions index the append-only lists of a branch
// (entries, a view, the selected progression), so a page costs O(page);
// the epoch ties the token to the lists it indexes, and a clear (or a new
// selected progression) makes older tokens stale.
type pageToken struct {
	Scope string `json:"s"`           // branch id, or "branches"
	Query string `json:"q"`           // what is listed, and in which direction
	Epoch uint64 `json:"e,omitempty"` // the lists' epoch
	Next  int64  `json:"n,omitempty"` // the next position
	After string `json:"a,omitempty"` // ListBranches: the last id returned
}

func (t pageToken) encode() string {
	data, _ := json.Marshal(t) // a struct of strings and integers always marshals
	return base64.RawURLEncoding.EncodeToString(data)
}

// decodePageToken reads a token and checks that it continues the same
// query of the same scope.
func decodePageToken(s, scope, query string) (pageToken, error) {
	var t pageToken
	data, err := base64.RawURLEncoding.DecodeString(s)
	if err == nil {
		err = json.Unmarshal(data, &t)
	}
	if err != nil || t.Scope != scope || t.Query != query {
		return pageToken{}, fieldErr("page_token", ErrStalePageToken, "page_token does not continue this listing")
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
