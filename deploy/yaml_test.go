package deploy

import (
	"fmt"
	"strings"
)

// A parser for the block-style subset of YAML the manifests use: mappings, sequences of scalars or
// mappings, plain, single- and double-quoted scalars, comments and "---" between documents. It
// rejects what it does not know (flow collections, anchors, multi-line scalars, tabs) instead of
// misreading it, so a manifest that leaves the subset fails the test and gets looked at. Scalars
// stay strings: the checks compare them as written.

type yamlLine struct {
	num    int // 1-based, for errors
	indent int
	text   string
}

// parseYAML returns the documents of src, each a map[string]any, []any or string.
func parseYAML(src string) ([]any, error) {
	var docs []any
	var cur []yamlLine
	flush := func() error {
		if len(cur) == 0 {
			return nil
		}
		v, next, err := parseBlock(cur, 0, cur[0].indent)
		if err != nil {
			return err
		}
		if next != len(cur) {
			return fmt.Errorf("line %d: unexpected indentation", cur[next].num)
		}
		docs = append(docs, v)
		cur = nil
		return nil
	}
	for i, raw := range strings.Split(src, "\n") {
		if strings.Contains(raw, "\t") {
			return nil, fmt.Errorf("line %d: tab character", i+1)
		}
		text := stripComment(raw)
		if strings.TrimSpace(text) == "" {
			continue
		}
		if strings.TrimSpace(text) == "---" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		trimmed := strings.TrimLeft(text, " ")
		cur = append(cur, yamlLine{num: i + 1, indent: len(text) - len(trimmed), text: strings.TrimRight(trimmed, " ")})
	}
	if err := flush(); err != nil {
		return nil, err
	}
	return docs, nil
}

// stripComment removes a comment: '#' at the start or after a space, outside quotes.
func stripComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || s[i-1] == ' '):
			return s[:i]
		}
	}
	return s
}

// parseBlock parses the block starting at lines[i], whose lines have the given indent.
func parseBlock(lines []yamlLine, i, indent int) (any, int, error) {
	if strings.HasPrefix(lines[i].text, "- ") || lines[i].text == "-" {
		return parseSequence(lines, i, indent)
	}
	return parseMapping(lines, i, indent)
}

func parseSequence(lines []yamlLine, i, indent int) (any, int, error) {
	var seq []any
	for i < len(lines) && lines[i].indent == indent {
		l := lines[i]
		if !strings.HasPrefix(l.text, "- ") && l.text != "-" {
			return nil, 0, fmt.Errorf("line %d: a mapping key among sequence items", l.num)
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		switch {
		case rest == "":
			if i+1 >= len(lines) || lines[i+1].indent <= indent {
				return nil, 0, fmt.Errorf("line %d: empty sequence item", l.num)
			}
			v, next, err := parseBlock(lines, i+1, lines[i+1].indent)
			if err != nil {
				return nil, 0, err
			}
			seq, i = append(seq, v), next
		case isKeyLine(rest):
			// "- key: value" starts a mapping whose other keys line up with "key".
			inner := indent + (len(l.text) - len(rest))
			lines[i] = yamlLine{num: l.num, indent: inner, text: rest}
			v, next, err := parseMapping(lines, i, inner)
			if err != nil {
				return nil, 0, err
			}
			seq, i = append(seq, v), next
		default:
			s, err := scalar(rest, l.num)
			if err != nil {
				return nil, 0, err
			}
			seq, i = append(seq, s), i+1
		}
	}
	return seq, i, nil
}

func parseMapping(lines []yamlLine, i, indent int) (any, int, error) {
	m := map[string]any{}
	for i < len(lines) && lines[i].indent == indent {
		l := lines[i]
		if !isKeyLine(l.text) {
			return nil, 0, fmt.Errorf("line %d: want key: value, got %q", l.num, l.text)
		}
		key, rest, _ := strings.Cut(l.text, ":")
		key, rest = strings.TrimSpace(key), strings.TrimSpace(rest)
		if _, dup := m[key]; dup {
			return nil, 0, fmt.Errorf("line %d: duplicate key %q", l.num, key)
		}
		if rest != "" {
			s, err := scalar(rest, l.num)
			if err != nil {
				return nil, 0, err
			}
			m[key], i = s, i+1
			continue
		}
		if i+1 >= len(lines) || lines[i+1].indent <= indent {
			m[key], i = nil, i+1
			continue
		}
		v, next, err := parseBlock(lines, i+1, lines[i+1].indent)
		if err != nil {
			return nil, 0, err
		}
		m[key], i = v, next
	}
	if i < len(lines) && lines[i].indent > indent {
		return nil, 0, fmt.Errorf("line %d: unexpected indentation", lines[i].num)
	}
	return m, i, nil
}

// isKeyLine reports whether s is "key:" or "key: value" with a plain key.
func isKeyLine(s string) bool {
	key, rest, ok := strings.Cut(s, ":")
	if !ok || key == "" || strings.ContainsAny(key, " \"'{}[]") {
		return false
	}
	return rest == "" || rest[0] == ' '
}

// scalar reads a plain or quoted scalar.
func scalar(s string, num int) (string, error) {
	switch {
	case strings.HasPrefix(s, `"`):
		if len(s) < 2 || !strings.HasSuffix(s, `"`) || strings.Contains(s[1:len(s)-1], `\`) {
			return "", fmt.Errorf("line %d: unsupported double-quoted scalar %s", num, s)
		}
		return s[1 : len(s)-1], nil
	case strings.HasPrefix(s, `'`):
		if len(s) < 2 || !strings.HasSuffix(s, `'`) {
			return "", fmt.Errorf("line %d: unterminated single-quoted scalar %s", num, s)
		}
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), nil
	case strings.ContainsAny(s[:1], "[{&*!|>%@`"):
		return "", fmt.Errorf("line %d: %q is outside the YAML subset this test reads", num, s)
	}
	return s, nil
}

// path follows keys (string) and indexes (int) into a parsed document.
func path(v any, steps ...any) (any, error) {
	for _, st := range steps {
		switch k := st.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil, fmt.Errorf("at %q: not a mapping", k)
			}
			if v, ok = m[k]; !ok {
				return nil, fmt.Errorf("no key %q", k)
			}
		case int:
			s, ok := v.([]any)
			if !ok || k >= len(s) {
				return nil, fmt.Errorf("at [%d]: not a sequence that long", k)
			}
			v = s[k]
		}
	}
	return v, nil
}
