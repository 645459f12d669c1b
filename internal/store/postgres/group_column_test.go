package postgres

import (
	"reflect"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// typedColumn (group commit's qAppendMany, docs/decisions/0021): a column of
// one type becomes a slice of it, NULLs kept; anything else is left as it is.
func TestTypedColumn(t *testing.T) {
	a, b := uuid.New(), uuid.New()
	for _, tc := range []struct {
		name string
		col  []any
		want any
	}{
		{"ids", []any{a, b}, []pgtype.UUID{{Bytes: a, Valid: true}, {Bytes: b, Valid: true}}},
		{"ids and NULLs", []any{nil, a, nil}, []pgtype.UUID{{}, {Bytes: a, Valid: true}, {}}},
		{"numbers", []any{int64(3), 4}, []int64{3, 4}},
		{"texts", []any{"x", "y"}, []string{"x", "y"}},
		{"numbers and a NULL", []any{int64(3), nil}, []any{int64(3), nil}},
		{"texts and a NULL", []any{nil, "y"}, []any{nil, "y"}},
		{"mixed", []any{a, "y"}, []any{a, "y"}},
		{"another type", []any{[]byte("x")}, []any{[]byte("x")}},
		{"all NULL", []any{nil, nil}, []any{nil, nil}},
	} {
		if got := typedColumn(tc.col); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: typedColumn(%v) = %#v, want %#v", tc.name, tc.col, got, tc.want)
		}
	}
}
