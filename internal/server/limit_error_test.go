package server

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestLimitError: each refusal of Validate is a *LimitError that names the field refused (by its Go
// name, a field of Limits), its value and its rule, found with errors.As through wrapping and
// errors.Is ErrInvalidLimits; Describe names the fields as the caller asks (cmd/historyd: flags).
func TestLimitError(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Limits)
		want   LimitError
		text   string // Error()
	}{
		{"zero message size", func(l *Limits) { l.MaxRecvMsgSize = 0 },
			LimitError{Field: "MaxRecvMsgSize", Value: 0, Rule: LimitPositive, Want: DefaultMaxRecvMsgSize},
			"invalid limits: MaxRecvMsgSize 0: must be positive, such as 4194304"},
		{"zero streams", func(l *Limits) { l.MaxConcurrentStreams = 0 },
			LimitError{Field: "MaxConcurrentStreams", Value: uint32(0), Rule: LimitPositive, Want: uint32(DefaultMaxConcurrentStreams)},
			"invalid limits: MaxConcurrentStreams 0: must be positive, such as 100"},
		{"zero ping interval", func(l *Limits) { l.KeepaliveMinTime = 0 },
			LimitError{Field: "KeepaliveMinTime", Value: time.Duration(0), Rule: LimitPositive, Want: DefaultKeepaliveMinTime},
			"invalid limits: KeepaliveMinTime 0s: must be positive, such as 10s"},
		{"negative keepalive time", func(l *Limits) { l.KeepaliveTime = -time.Second },
			LimitError{Field: "KeepaliveTime", Value: -time.Second, Rule: LimitPositive, Want: DefaultKeepaliveTime},
			"invalid limits: KeepaliveTime -1s: must be positive, such as 2m0s"},
		{"zero keepalive timeout", func(l *Limits) { l.KeepaliveTimeout = 0 },
			LimitError{Field: "KeepaliveTimeout", Value: time.Duration(0), Rule: LimitPositive, Want: DefaultKeepaliveTimeout},
			"invalid limits: KeepaliveTimeout 0s: must be positive, such as 20s"},
		{"zero idle", func(l *Limits) { l.MaxConnectionIdle = 0 },
			LimitError{Field: "MaxConnectionIdle", Value: time.Duration(0), Rule: LimitPositive, Want: DefaultMaxConnectionIdle},
			"invalid limits: MaxConnectionIdle 0s: must be positive, such as 15m0s"},
		{"negative age", func(l *Limits) { l.MaxConnectionAge = -time.Second },
			LimitError{Field: "MaxConnectionAge", Value: -time.Second, Rule: LimitNotNegative, Want: time.Duration(0)},
			"invalid limits: MaxConnectionAge -1s: must not be negative (0s: none)"},
		{"negative grace", func(l *Limits) { l.MaxConnectionAgeGrace = -time.Second },
			LimitError{Field: "MaxConnectionAgeGrace", Value: -time.Second, Rule: LimitNotNegative, Want: time.Duration(0)},
			"invalid limits: MaxConnectionAgeGrace -1s: must not be negative (0s: none)"},
		{"zero connections", func(l *Limits) { l.MaxConnections = 0 },
			LimitError{Field: "MaxConnections", Value: 0, Rule: LimitPositive, Want: DefaultMaxConnections},
			"invalid limits: MaxConnections 0: must be positive, such as " + fmt.Sprint(DefaultMaxConnections)},
		{"in-flight budget below one request", func(l *Limits) { l.MaxRecvMsgSize, l.MaxInflightBytes = 2048, 1024 },
			LimitError{Field: "MaxInflightBytes", Value: int64(1024), Rule: LimitBelowOther, Other: "MaxRecvMsgSize", OtherValue: 2048},
			"invalid limits: MaxInflightBytes 1024 is below MaxRecvMsgSize 2048: every call reserves MaxRecvMsgSize of it, so none could start"},
		{"too many stream workers", func(l *Limits) { l.StreamWorkers = MaxStreamWorkers + 1 },
			LimitError{Field: "StreamWorkers", Value: uint32(MaxStreamWorkers + 1), Rule: LimitAtMost, Want: uint32(MaxStreamWorkers)},
			"invalid limits: StreamWorkers 1025: want 0 to 1024 (it is allocated whole, up front)"},
		{"window above its maximum", func(l *Limits) { l.MaxAppendWindow = MaxMaxAppendWindow + 1 },
			LimitError{Field: "MaxAppendWindow", Value: MaxMaxAppendWindow + 1, Rule: LimitAtMost, Want: MaxMaxAppendWindow},
			"invalid limits: MaxAppendWindow 65537: want 0 to 65536 (it is allocated whole, up front)"},
		{"negative window", func(l *Limits) { l.MaxAppendWindow = -1 },
			LimitError{Field: "MaxAppendWindow", Value: -1, Rule: LimitNotNegativeDefault, Want: 0},
			"invalid limits: MaxAppendWindow -1: must not be negative (0: the server's default)"},
		{"negative response budget", func(l *Limits) { l.MaxResponseBytes = -1 },
			LimitError{Field: "MaxResponseBytes", Value: -1, Rule: LimitNotNegativeDefault, Want: 0},
			"invalid limits: MaxResponseBytes -1: must not be negative (0: the server's default)"},
		{"negative render cap", func(l *Limits) { l.MaxRenderedBytes = -1 },
			LimitError{Field: "MaxRenderedBytes", Value: -1, Rule: LimitNotNegativeDefault, Want: 0},
			"invalid limits: MaxRenderedBytes -1: must not be negative (0: the server's default)"},
		{"negative import limit", func(l *Limits) { l.MaxImportBytes = -1 },
			LimitError{Field: "MaxImportBytes", Value: -1, Rule: LimitNotNegativeDefault, Want: 0},
			"invalid limits: MaxImportBytes -1: must not be negative (0: the server's default)"},
		{"render cap above the response budget", func(l *Limits) { l.MaxResponseBytes, l.MaxRenderedBytes = 1024, 2048 },
			LimitError{Field: "MaxRenderedBytes", Value: 2048, Rule: LimitAboveOther, Other: "MaxResponseBytes", OtherValue: 1024},
			"invalid limits: MaxRenderedBytes 2048 is above MaxResponseBytes 1024: a rendering that large could never be sent"},
		{"render cap above the default response budget", func(l *Limits) { l.MaxResponseBytes, l.MaxRenderedBytes = 0, DefaultMaxResponseBytes+1 },
			LimitError{Field: "MaxRenderedBytes", Value: DefaultMaxResponseBytes + 1, Rule: LimitAboveOther, Other: "MaxResponseBytes", OtherValue: DefaultMaxResponseBytes},
			fmt.Sprintf("invalid limits: MaxRenderedBytes %d is above MaxResponseBytes %d: a rendering that large could never be sent", DefaultMaxResponseBytes+1, DefaultMaxResponseBytes)},
	}
	rules := map[LimitRule]bool{}
	limitsType := reflect.TypeFor[Limits]()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l := DefaultLimits()
			tc.change(&l)
			err := fmt.Errorf("configuring the server: %w", l.Validate())
			var le *LimitError
			if !errors.As(err, &le) {
				t.Fatalf("Validate() = %v, want a *LimitError", err)
			}
			if !errors.Is(err, ErrInvalidLimits) {
				t.Errorf("Validate() = %v, want it to wrap ErrInvalidLimits", err)
			}
			if *le != tc.want {
				t.Errorf("Validate() = %+v, want %+v", *le, tc.want)
			}
			if le.Error() != tc.text {
				t.Errorf("Error() = %q\nwant %q", le.Error(), tc.text)
			}
			for _, f := range []string{le.Field, le.Other} {
				if _, ok := limitsType.FieldByName(f); f != "" && !ok {
					t.Errorf("%q is not a field of Limits", f)
				}
			}
			// Describe names the fields as asked, each where Error names it.
			flag := func(field string) string { return "--" + strings.ToLower(field) }
			want := strings.TrimPrefix(tc.text, "invalid limits: ")
			for _, f := range []string{le.Field, le.Other} {
				if f != "" {
					want = strings.ReplaceAll(want, f, flag(f))
				}
			}
			if got := le.Describe(flag); got != want {
				t.Errorf("Describe = %q\nwant %q", got, want)
			}
			// WithLimits promises that a Limits that does not validate is repaired: every refusal,
			// the render cap above the response budget included.
			if got := l.orDefaults(); got.Validate() != nil {
				t.Errorf("orDefaults() = %+v does not validate", got)
			}
			rules[le.Rule] = true
		})
	}
	for r := LimitPositive; r <= LimitAtMost; r++ {
		if !rules[r] {
			t.Errorf("no case refuses with rule %d", r)
		}
	}
}

// TestLimitErrorEveryField: whatever field is out of range, the refusal names a field of Limits,
// with that field's value; a zero or negative in each field in turn is refused (but for those
// where zero or the sign means something) and names the field changed.
func TestLimitErrorEveryField(t *testing.T) {
	limitsType := reflect.TypeFor[Limits]()
	for i := range limitsType.NumField() {
		f := limitsType.Field(i)
		for _, v := range []int64{0, -1} {
			l := DefaultLimits()
			fv := reflect.ValueOf(&l).Elem().Field(i)
			switch fv.Kind() {
			case reflect.Int, reflect.Int64:
				fv.SetInt(v)
			case reflect.Uint32:
				if v < 0 {
					continue
				}
				fv.SetUint(uint64(v))
			case reflect.Bool:
				continue // either value is valid
			default:
				t.Fatalf("Limits.%s is a %v: teach this test its out-of-range values", f.Name, fv.Kind())
			}
			err := l.Validate()
			if err == nil {
				continue // zero (or the default in its place) is valid for this field
			}
			var le *LimitError
			if !errors.As(err, &le) {
				t.Fatalf("Limits.%s = %d: Validate() = %v, want a *LimitError", f.Name, v, err)
			}
			if le.Field != f.Name && le.Other != f.Name {
				t.Errorf("Limits.%s = %d: the refusal names %s (and %q), not the field changed", f.Name, v, le.Field, le.Other)
			}
		}
	}
}
