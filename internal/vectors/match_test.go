package vectors

import (
	"testing"

	"github.com/historyd/historyd/internal/envelope/jsonv"
)

func mustParse(t *testing.T, s string) jsonv.Value {
	t.Helper()
	v, err := jsonv.ParseString(s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestMatcherPlaceholdersBindConsistently(t *testing.T) {
	m := NewMatcher()
	exp := mustParse(t, `{"a":"<x>","b":["<x>","<created_at>"],"t":"System Time: <YYYY-MM-DDTHH:MM+00:00>\n\nS"}`)
	ok := mustParse(t, `{"b":["aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa",1.5],"a":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa","t":"System Time: 2026-12-02T15:04+00:00\n\nS"}`)
	if d := m.Match(exp, ok); d != "" {
		t.Fatalf("unexpected difference: %s", d)
	}
	bad := mustParse(t, `{"a":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa","b":["bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb",1],"t":"System Time: 2026-12-02T15:04+00:00\n\nS"}`)
	if d := NewMatcher().Match(exp, bad); d == "" {
		t.Fatal("a placeholder bound to two ids must not match")
	}
	// issue 13 item 9: two placeholders never bind one id (a fork that kept the source's ids).
	same := mustParse(t, `{"a":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa","c":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"}`)
	if d := NewMatcher().Match(mustParse(t, `{"a":"<ins>","c":"<c_ins>"}`), same); d == "" {
		t.Fatal("two placeholders bound to one id must not match")
	}
	if d := NewMatcher().Match(mustParse(t, `{"n":1}`), mustParse(t, `{"n":1.0}`)); d != "" {
		t.Fatalf("numbers compare by value: %s", d)
	}
	if d := NewMatcher().Match(mustParse(t, `{"n":1}`), mustParse(t, `{"n":1,"extra":2}`)); d == "" {
		t.Fatal("an unexpected key must be reported")
	}
}

func TestMatchSteps(t *testing.T) {
	want := mustParse(t, `[{"result":"<m>"},{"result":null,"read":{"m.sender":"alice","x.y":{"error":"KeyError"}}},{"error":{"type":"ValueError","message":"Invalid"}}]`)
	good := mustParse(t, `[{"result":{"id":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"}},{"result":null,"read":{"m.sender":"alice"}},{"error":{"type":"INVALID_ARGUMENT","message":"historyd: Invalid input"}}]`)
	if d := MatchSteps(want, good, false); d != "" {
		t.Fatalf("unexpected difference: %s", d)
	}
	for _, bad := range []string{
		`[{"result":{"id":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"}},{"result":null,"read":{"m.sender":"bob"}},{"error":{}}]`,
		`[{"result":{"id":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"}},{"result":null,"read":{"m.sender":"alice"}},{"result":1}]`,
		`[{"result":{"id":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"}}]`,
		// issue 13 item 8: the error's kind and LionAGI's kept text are compared.
		`[{"result":{"id":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"}},{"result":null,"read":{"m.sender":"alice"}},{"error":{"type":"INTERNAL","message":"Invalid"}}]`,
		`[{"result":{"id":"aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa"}},{"result":null,"read":{"m.sender":"alice"}},{"error":{"type":"INVALID_ARGUMENT","message":"other words"}}]`,
	} {
		if d := MatchSteps(want, mustParse(t, bad), false); d == "" {
			t.Errorf("MatchSteps accepted %s", bad)
		}
	}
	// issue 13 item 12: a missing result or read is not null; only a KeyError-shaped read is skipped.
	for _, c := range []struct{ want, got string }{
		{`[{"result":null}]`, `[{"read":{}}]`},
		{`[{"result":null,"read":{"m.x":null}}]`, `[{"result":null,"read":{}}]`},
		{`[{"result":null,"read":{"m.x":{"error":"not a KeyError"}}}]`, `[{"result":null,"read":{"m.x":1}}]`},
	} {
		if d := MatchSteps(mustParse(t, c.want), mustParse(t, c.got), false); d == "" {
			t.Errorf("MatchSteps(%s) accepted %s", c.want, c.got)
		}
	}
	// subset: only the keys the expected result names are compared.
	if d := MatchSteps(mustParse(t, `[{"result":{"a":1}}]`), mustParse(t, `[{"result":{"a":1,"b":2}}]`), true); d != "" {
		t.Fatalf("subset: %s", d)
	}
	if d := MatchSteps(mustParse(t, `[{"result":{"a":1}}]`), mustParse(t, `[{"result":{"a":1,"b":2}}]`), false); d == "" {
		t.Fatal("without subset an extra key must be reported")
	}
}
