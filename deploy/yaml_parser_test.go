package deploy

import (
	"reflect"
	"testing"
)

// TestParseYAML: the subset parser reads mappings, sequences of scalars and of mappings, quoted
// scalars, comments and several documents, and refuses what it does not know, so the manifest
// checks cannot pass on a misread file.
func TestParseYAML(t *testing.T) {
	src := `# leading comment
kind: Deployment   # trailing comment
spec:
  replicas: 1
  labels:
    app: "historyd # not a comment"
  args:
    - --flag
    - 'it''s'
  containers:
    - name: a
      ports:
        - containerPort: 1
    -
      name: b
---
kind: Service
`
	docs, err := parseYAML(src)
	if err != nil {
		t.Fatal(err)
	}
	want := []any{
		map[string]any{
			"kind": "Deployment",
			"spec": map[string]any{
				"replicas": "1",
				"labels":   map[string]any{"app": "historyd # not a comment"},
				"args":     []any{"--flag", "it's"},
				"containers": []any{
					map[string]any{"name": "a", "ports": []any{map[string]any{"containerPort": "1"}}},
					map[string]any{"name": "b"},
				},
			},
		},
		map[string]any{"kind": "Service"},
	}
	if !reflect.DeepEqual(docs, want) {
		t.Errorf("parseYAML = %#v\nwant %#v", docs, want)
	}
	for name, bad := range map[string]string{
		"flow sequence":  "a: [1, 2]\n",
		"flow mapping":   "a: {b: 1}\n",
		"anchor":         "a: &x 1\n",
		"block scalar":   "a: |\n  text\n",
		"tab":            "a:\n\tb: 1\n",
		"bad indent":     "a:\n    b: 1\n  c: 2\n",
		"duplicate key":  "a: 1\na: 2\n",
		"not a key":      "just text\n",
		"mixed sequence": "a:\n  - 1\n  b: 2\n",
	} {
		if _, err := parseYAML(bad); err == nil {
			t.Errorf("%s: parseYAML(%q) succeeded", name, bad)
		}
	}
}
