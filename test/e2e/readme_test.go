//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The README's shown outputs are what the server prints (issue 19: "a test that runs the README's
// commands and compares what it can"). These run the README's grpcurl commands against the real
// binary, with the pinned grpcurl, and compare the outputs the README shows.

const grpcurlCmd = "go tool -modfile=tools/go.mod grpcurl"

func readREADME(t *testing.T) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// shownOutput returns the "#   " comment lines that follow the README line holding command, with
// the prefix cut: what the README says the command prints.
func shownOutput(t *testing.T, readme, command string) []string {
	t.Helper()
	lines := strings.Split(readme, "\n")
	i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, command) })
	if i < 0 {
		t.Fatalf("README has no line with %q", command)
	}
	var out []string
	for _, l := range lines[i+1:] {
		rest, ok := strings.CutPrefix(l, "#   ")
		if !ok {
			break
		}
		out = append(out, rest)
	}
	return out
}

// runREADMECommand runs one README grpcurl command line against p with bash, the pinned grpcurl
// built by TestMain and p's address, and returns its stdout.
func runREADMECommand(t *testing.T, p *proc, line string, extra ...string) (string, error) {
	t.Helper()
	line = strings.ReplaceAll(line, grpcurlCmd, grpcurlBin+" "+strings.Join(extra, " "))
	line = strings.ReplaceAll(line, "127.0.0.1:50051", p.addr)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "bash", "-c", line)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		err = &commandError{err: err, stderr: stderr.String()}
	}
	return stdout.String(), err
}

type commandError struct {
	err    error
	stderr string
}

func (e *commandError) Error() string { return e.err.Error() + ": " + e.stderr }

// TestREADMEGrpcurlOutputs: `list` shows the services the server registers, Health/Check the
// answer, each History API command of the README succeeds, and the watch's start frame has the
// fields the README shows (no afterSequence: JSON leaves zero values out).
func TestREADMEGrpcurlOutputs(t *testing.T) {
	readme := readREADME(t)
	p := startServer(t)

	listCmd := grpcurlCmd + " -plaintext 127.0.0.1:50051 list"
	got, err := runREADMECommand(t, p, listCmd)
	if err != nil {
		t.Fatal(err)
	}
	if want := shownOutput(t, readme, listCmd); !slices.Equal(strings.Fields(got), want) {
		t.Errorf("list printed %q, README shows %q", strings.Fields(got), want)
	}

	checkCmd := grpcurlCmd + " -plaintext 127.0.0.1:50051 grpc.health.v1.Health/Check"
	got, err = runREADMECommand(t, p, checkCmd)
	if err != nil {
		t.Fatal(err)
	}
	if want := strings.Join(shownOutput(t, readme, checkCmd), "\n"); strings.TrimSpace(got) != want {
		t.Errorf("Health/Check printed %q, README shows %q", got, want)
	}

	// The History API block, in order: each command must succeed as shown.
	for _, line := range strings.Split(readme, "\n") {
		if strings.HasPrefix(line, grpcurlCmd) && strings.Contains(line, "historyd.v1.HistoryService/") &&
			strings.Contains(line, "0c0ffee0-0000-4000-8000-000000000002") && !strings.Contains(line, "/WatchBranch") {
			if _, err := runREADMECommand(t, p, line); err != nil {
				t.Errorf("README command failed: %s\n%v", line, err)
			}
		}
	}
	watchCmd := grpcurlCmd + ` -plaintext -d '{"branch_id": "0c0ffee0-0000-4000-8000-000000000002", "after_sequence": "0"}' 127.0.0.1:50051 historyd.v1.HistoryService/WatchBranch`
	out, _ := runREADMECommand(t, p, watchCmd, "-max-time", "2") // the stream never ends; grpcurl stops it
	dec := json.NewDecoder(strings.NewReader(out))
	var first map[string]map[string]any
	if err := dec.Decode(&first); err != nil {
		t.Fatalf("watch printed %q: %v", out, err)
	}
	shown := shownOutput(t, readme, watchCmd)
	var shownStart map[string]map[string]any
	if err := json.Unmarshal([]byte(shown[0]), &shownStart); err != nil {
		t.Fatalf("README's start frame %q: %v", shown[0], err)
	}
	keys := func(m map[string]any) []string {
		var k []string
		for key := range m {
			k = append(k, key)
		}
		slices.Sort(k)
		return k
	}
	if g, w := keys(first["start"]), keys(shownStart["start"]); !slices.Equal(g, w) {
		t.Errorf("start frame fields %v, README shows %v", g, w)
	}
	if first["start"]["headSequence"] != shownStart["start"]["headSequence"] || first["start"]["oldestSequence"] != shownStart["start"]["oldestSequence"] {
		t.Errorf("start frame %v, README shows %v (after the History API block above it)", first["start"], shownStart["start"])
	}
}

var uuidPattern = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// numberIDs replaces each distinct UUID by its order of first appearance, so that two projections
// with different random ids compare equal exactly when they have the same shape and the same ids
// in the same places (a tool_call_id names its tool call).
func numberIDs(s string) string {
	seen := map[string]string{}
	return uuidPattern.ReplaceAllStringFunc(s, func(id string) string {
		if n, ok := seen[id]; ok {
			return n
		}
		seen[id] = "id-" + string(rune('a'+len(seen)))
		return seen[id]
	})
}

// TestREADMEOpenAIProjection: the README's CHAT_FORMAT_OPENAI projection of the conversation of
// docs/examples/conversation.sh is what the server answers (issue 19 acceptance).
func TestREADMEOpenAIProjection(t *testing.T) {
	readme := readREADME(t)
	_, block, ok := strings.Cut(readme, "<!-- readme-test: openai-projection -->\n```json\n")
	if !ok {
		t.Fatal("README has no openai-projection block")
	}
	block, _, _ = strings.Cut(block, "```")
	var shown any
	if err := json.Unmarshal([]byte(block), &shown); err != nil {
		t.Fatalf("README's OpenAI projection is not JSON: %v", err)
	}
	p := startServer(t)
	steps := runConversation(t, p)
	oa, ok := steps["chat openai"]
	if !ok {
		t.Fatal("conversation.sh printed no chat openai step")
	}
	var got any
	if err := json.Unmarshal([]byte(oa.MessagesJSON), &got); err != nil {
		t.Fatalf("messagesJson %q: %v", oa.MessagesJSON, err)
	}
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(shown)
	if numberIDs(string(g)) != numberIDs(string(w)) {
		t.Errorf("the server's OpenAI projection\n%s\nREADME shows\n%s", g, w)
	}
	if call := steps["tool call"].Message.ID; !strings.Contains(string(g), `"tool_call_id":"`+call+`"`) {
		t.Errorf("projection %s does not answer the tool call %s", g, call)
	}
}
