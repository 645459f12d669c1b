package vectors

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

// Matcher compares expected (recorded) JSON with actual JSON, binding
// placeholders: "<id>", "<clone>", "<name>", "<id:N>" must be UUID text and
// the same placeholder must be the same id throughout one record;
// different placeholders must be different ids; "<created_at>" and "<now>"
// match any number; "<YYYY-MM-DDTHH:MM+00:00>"
// matches a UTC minute timestamp, also inside a longer string.
type Matcher struct {
	Bound map[string]string
}

// NewMatcher returns a Matcher with no bindings.
func NewMatcher() *Matcher { return &Matcher{Bound: map[string]string{}} }

var (
	placeholderRE = regexp.MustCompile(`^<[A-Za-z_][A-Za-z0-9_:]*>$`)
	uuidRE        = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	minuteToken   = "<YYYY-MM-DDTHH:MM+00:00>"
	minuteRE      = `\d{4}-\d{2}-\d{2}T\d{2}:\d{2}\+00:00`
)

// IsPlaceholder reports whether s is a whole-value placeholder.
func IsPlaceholder(s string) bool { return placeholderRE.MatchString(s) }

// Match returns "" when actual matches expected, else a description of the
// first difference (with its JSON path).
func (m *Matcher) Match(expected, actual jsonv.Value) string {
	return m.match("$", expected, actual)
}

func (m *Matcher) match(path string, exp, act jsonv.Value) string {
	if s, ok := exp.Str(); ok {
		if strings.Contains(s, minuteToken) {
			a, isStr := act.Str()
			pattern := "^" + strings.ReplaceAll(regexp.QuoteMeta(s), regexp.QuoteMeta(minuteToken), minuteRE) + "$"
			if isStr && regexp.MustCompile(pattern).MatchString(a) {
				return ""
			}
			return fmt.Sprintf("%s: want %s, got %s", path, exp, act)
		}
		if IsPlaceholder(s) {
			switch s {
			case "<created_at>", "<now>":
				if act.Kind() == jsonv.Number {
					return ""
				}
				return fmt.Sprintf("%s: want a number for %s, got %s", path, s, act)
			}
			a, isStr := act.Str()
			if !isStr || !uuidRE.MatchString(a) {
				return fmt.Sprintf("%s: want a UUID for %s, got %s", path, s, act)
			}
			if prev, ok := m.Bound[s]; ok && prev != a {
				return fmt.Sprintf("%s: %s was %s earlier, now %s", path, s, prev, a)
			}
			// Different placeholders bind different values (issue 13 item 9): a fork that kept the
			// source's ids must not match "<c_ins>" to the id already bound to "<ins>".
			for other, v := range m.Bound {
				if other != s && v == a {
					return fmt.Sprintf("%s: %s is %s, which %s already is", path, s, a, other)
				}
			}
			m.Bound[s] = a
			return ""
		}
	}
	if exp.Kind() != act.Kind() {
		return fmt.Sprintf("%s: want %s, got %s", path, exp, act)
	}
	switch exp.Kind() {
	case jsonv.Array:
		if exp.Len() != act.Len() {
			return fmt.Sprintf("%s: want %d elements %s, got %d %s", path, exp.Len(), exp, act.Len(), act)
		}
		for i := range exp.Elems() {
			if d := m.match(fmt.Sprintf("%s[%d]", path, i), exp.Elems()[i], act.Elems()[i]); d != "" {
				return d
			}
		}
		return ""
	case jsonv.Object:
		for _, mem := range exp.Members() {
			av, ok := act.Get(mem.Key)
			if !ok {
				return fmt.Sprintf("%s: missing key %q (got %s)", path, mem.Key, act)
			}
			if d := m.match(path+"."+mem.Key, mem.Value, av); d != "" {
				return d
			}
		}
		if exp.Len() != act.Len() {
			for _, mem := range act.Members() {
				if !exp.Has(mem.Key) {
					return fmt.Sprintf("%s: unexpected key %q = %s", path, mem.Key, mem.Value)
				}
			}
		}
		return ""
	}
	if !jsonv.Equal(exp, act) {
		return fmt.Sprintf("%s: want %s, got %s", path, exp, act)
	}
	return ""
}
