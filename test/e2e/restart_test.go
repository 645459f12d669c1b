//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Issue 14's acceptance on the real binary: the sqlite engine (the default) keeps everything a
// client can observe across a restart (SIGTERM) and a crash (kill -9). Each test serves from its
// own temporary --data-dir, never the clone's ./data.

// startSQLite starts historyd on the sqlite engine in dir (startServer's --store memory is
// overridden: a later flag wins).
func startSQLite(t *testing.T, dir string, extra ...string) *proc {
	t.Helper()
	return startServer(t, append([]string{"--store", "sqlite", "--data-dir", dir}, extra...)...)
}

// servingLine returns p's "serving" log line, decoded.
func servingLine(t *testing.T, p *proc) map[string]any {
	t.Helper()
	for _, line := range p.stderr.Lines() {
		var m map[string]any
		if json.Unmarshal([]byte(line), &m) == nil && m["msg"] == "serving" {
			return m
		}
	}
	t.Fatalf("no serving line in:\n%s", strings.Join(p.stderr.Lines(), "\n"))
	return nil
}

// instruction is an AddMessage of an instruction with text.
func instruction(branch, text, requestID string) *historyv1.AddMessageRequest {
	return &historyv1.AddMessageRequest{
		BranchId:  branch,
		RequestId: requestID,
		Input: &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
			InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: text},
		}},
	}
}

// branchIDs lists every branch's id, paging to the end.
func branchIDs(ctx context.Context, t *testing.T, c historyv1.HistoryServiceClient) []string {
	t.Helper()
	var ids []string
	token := ""
	for {
		page, err := c.ListBranches(ctx, &historyv1.ListBranchesRequest{PageSize: 100, PageToken: token})
		if err != nil {
			t.Fatalf("ListBranches: %v", err)
		}
		for _, b := range page.GetBranches() {
			ids = append(ids, b.GetId())
		}
		if token = page.GetNextPageToken(); token == "" {
			return ids
		}
	}
}

// export is ExportBranch in JSON mode.
func export(ctx context.Context, t *testing.T, c historyv1.HistoryServiceClient, branch string) *historyv1.ExportBranchResponse {
	t.Helper()
	e, err := c.ExportBranch(ctx, &historyv1.ExportBranchRequest{BranchId: branch, Mode: historyv1.SerializationMode_SERIALIZATION_MODE_JSON})
	if err != nil {
		t.Fatalf("ExportBranch(%s): %v", branch, err)
	}
	return e
}

// nextCommit returns the next commit frame of a watch, skipping heartbeats.
func nextCommit(t *testing.T, s historyv1.HistoryService_WatchBranchClient) *historyv1.BranchCommit {
	t.Helper()
	for {
		f, err := s.Recv()
		if err != nil {
			t.Fatalf("WatchBranch: %v", err)
		}
		if c := f.GetCommit(); c != nil {
			return c
		}
	}
}

// TestRestartKeepsHistory: issue 14 acceptance ("make run, Ctrl-C, make run again: the branches
// made before are listed"), with SIGTERM on the real binary: after the restart on the same
// --data-dir, ListBranches lists the branches; ExportBranch is byte-identical; a watch cursor from
// before resumes with no gap (the events written after it are replayed, then new ones follow); a
// repeated request_id returns the first response and writes nothing; docs/examples/conversation.sh
// runs before and after (it deletes its branch from an earlier run when it starts, so the second
// run deletes the first run's branch after the restart).
func TestRestartKeepsHistory(t *testing.T) {
	dir := t.TempDir()
	p := startSQLite(t, dir)
	if l := servingLine(t, p); l["store"] != "sqlite" || l["data_file"] != filepath.Join(dir, "historyd.db") {
		t.Errorf("serving line store=%v data_file=%v, want sqlite and %s", l["store"], l["data_file"], filepath.Join(dir, "historyd.db"))
	}
	runConversation(t, p)

	ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
	defer cancel()
	c := historyv1.NewHistoryServiceClient(dial(t, p))
	var branches []string
	for i := range 3 {
		b, err := c.CreateBranch(ctx, &historyv1.CreateBranchRequest{RequestId: fmt.Sprintf("create-%d", i), Name: proto.String(fmt.Sprintf("b%d", i))})
		if err != nil {
			t.Fatalf("CreateBranch: %v", err)
		}
		branches = append(branches, b.GetBranch().GetId())
		for j := range 3 {
			if _, err := c.AddMessage(ctx, instruction(b.GetBranch().GetId(), fmt.Sprintf("message %d of %d", j, i), "")); err != nil {
				t.Fatalf("AddMessage: %v", err)
			}
		}
	}
	watched := branches[0]
	first, err := c.AddMessage(ctx, instruction(watched, "written once", "add-once"))
	if err != nil {
		t.Fatalf("AddMessage: %v", err)
	}
	// The watcher's cursor: the head now, and the incarnation from the start frame.
	w, err := c.WatchBranch(ctx, &historyv1.WatchBranchRequest{BranchId: watched})
	if err != nil {
		t.Fatal(err)
	}
	start, err := w.Recv()
	if err != nil || start.GetStart() == nil {
		t.Fatalf("the watch's first frame = %v, %v; want the start frame", start, err)
	}
	incarnation, cursor := start.GetStart().GetIncarnation(), start.GetStart().GetHeadSequence()
	if cursor != first.GetHeadSequence() {
		t.Fatalf("the watch starts at head %d, want the last write's %d", cursor, first.GetHeadSequence())
	}
	// One write past the cursor before the restart: after it, the resumed watch must replay it.
	missed, err := c.AddMessage(ctx, instruction(watched, "after the cursor", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := nextCommit(t, w); got.GetFirstSequence() != cursor+1 {
		t.Fatalf("the watch's commit starts at %d, want %d", got.GetFirstSequence(), cursor+1)
	}
	idsBefore := branchIDs(ctx, t, c)
	exports := map[string]*historyv1.ExportBranchResponse{}
	for _, b := range branches {
		exports[b] = export(ctx, t, c, b)
	}

	if code, _ := stop(t, p, syscall.SIGTERM, startTimeout); code != 0 {
		t.Fatalf("historyd exited %d on SIGTERM, want 0; log:\n%s", code, strings.Join(p.stderr.Lines(), "\n"))
	}

	p = startSQLite(t, dir)
	c = historyv1.NewHistoryServiceClient(dial(t, p))
	idsAfter := branchIDs(ctx, t, c)
	// The branches made here and conversation.sh's (it deletes its branch when it starts, not at
	// its end: its second run below deletes this one after the restart).
	if !slices.Equal(idsBefore, idsAfter) || len(idsAfter) != len(branches)+1 {
		t.Errorf("ListBranches after the restart = %v, want %v (the %d branches made before and conversation.sh's)", idsAfter, idsBefore, len(branches))
	}
	for _, b := range branches {
		after := export(ctx, t, c, b)
		if after.GetData() != exports[b].GetData() || after.GetHeadSequence() != exports[b].GetHeadSequence() {
			t.Errorf("ExportBranch(%s) after the restart differs: head %d, want %d; data equal %v",
				b, after.GetHeadSequence(), exports[b].GetHeadSequence(), after.GetData() == exports[b].GetData())
		}
	}

	// The repeated request id: the first response, and nothing written.
	again, err := c.AddMessage(ctx, instruction(watched, "written once", "add-once"))
	if err != nil {
		t.Fatalf("the repeated AddMessage: %v", err)
	}
	if !proto.Equal(again, first) {
		t.Errorf("the repeated AddMessage after the restart = %v, want the first response %v", again, first)
	}
	if e := export(ctx, t, c, watched); e.GetHeadSequence() != missed.GetHeadSequence() || e.GetData() != exports[watched].GetData() {
		t.Errorf("after the repeated request id, head %d, want %d and the same data: it wrote", e.GetHeadSequence(), missed.GetHeadSequence())
	}

	// The cursor from before: same incarnation, the missed commit replayed, then a new one, no gap.
	w, err = c.WatchBranch(ctx, &historyv1.WatchBranchRequest{BranchId: watched, AfterSequence: proto.Uint64(cursor), Incarnation: proto.String(incarnation)})
	if err != nil {
		t.Fatal(err)
	}
	start, err = w.Recv()
	if err != nil || start.GetStart() == nil {
		t.Fatalf("resuming the watch after the restart: %v, %v; want the start frame (the incarnation must persist)", start, err)
	}
	if start.GetStart().GetIncarnation() != incarnation {
		t.Errorf("incarnation after the restart %q, want %q", start.GetStart().GetIncarnation(), incarnation)
	}
	if got := nextCommit(t, w); got.GetFirstSequence() != cursor+1 || got.GetLastSequence() != missed.GetHeadSequence() {
		t.Errorf("the resumed watch's first commit = %d..%d, want %d..%d (the write after the cursor)",
			got.GetFirstSequence(), got.GetLastSequence(), cursor+1, missed.GetHeadSequence())
	}
	live, err := c.AddMessage(ctx, instruction(watched, "after the restart", ""))
	if err != nil {
		t.Fatal(err)
	}
	if got := nextCommit(t, w); got.GetFirstSequence() != missed.GetHeadSequence()+1 || got.GetLastSequence() != live.GetHeadSequence() {
		t.Errorf("the live commit after the restart = %d..%d, want %d..%d", got.GetFirstSequence(), got.GetLastSequence(),
			missed.GetHeadSequence()+1, live.GetHeadSequence())
	}

	runConversation(t, p)
	if code, _ := stop(t, p, syscall.SIGTERM, startTimeout); code != 0 {
		t.Errorf("historyd exited %d on SIGTERM, want 0", code)
	}
}

// TestRestartAfterKill9: issue 14's --sync=normal promise, "an acknowledged write survives kill -9
// of historyd": the process is killed right after AddMessage is acknowledged, and the restarted
// server on the same --data-dir has the message. Run for both sync modes (full promises more).
func TestRestartAfterKill9(t *testing.T) {
	for _, sync := range []string{"normal", "full"} {
		t.Run(sync, func(t *testing.T) {
			dir := t.TempDir()
			p := startSQLite(t, dir, "--sync", sync)
			ctx, cancel := context.WithTimeout(context.Background(), 3*startTimeout)
			defer cancel()
			c := historyv1.NewHistoryServiceClient(dial(t, p))
			b, err := c.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
			if err != nil {
				t.Fatal(err)
			}
			branch := b.GetBranch().GetId()
			acked, err := c.AddMessage(ctx, instruction(branch, "acknowledged just before the kill", ""))
			if err != nil {
				t.Fatal(err)
			}
			stop(t, p, syscall.SIGKILL, startTimeout) // at once: no shutdown, no checkpoint

			p = startSQLite(t, dir, "--sync", sync)
			c = historyv1.NewHistoryServiceClient(dial(t, p))
			e := export(ctx, t, c, branch)
			if e.GetHeadSequence() != acked.GetHeadSequence() || !strings.Contains(e.GetData(), acked.GetMessage().GetId()) {
				t.Errorf("after kill -9: head %d, want %d, and the export holds message %s: %v",
					e.GetHeadSequence(), acked.GetHeadSequence(), acked.GetMessage().GetId(), strings.Contains(e.GetData(), acked.GetMessage().GetId()))
			}
		})
	}
}

// TestSecondServerOnDataDirRefused: issue 14: "a second historyd on the same data dir is refused at
// start (an exclusive lock; one line naming the directory)"; the first keeps serving.
func TestSecondServerOnDataDirRefused(t *testing.T) {
	dir := t.TempDir()
	first := startSQLite(t, dir)
	second := startProcess(t, "--listen", "127.0.0.1:0", "--log-format", "json", "--store", "sqlite", "--data-dir", dir)
	code, _ := wait(t, second, startTimeout)
	lines := second.stderr.Lines()
	if code == 0 || len(lines) != 1 || !strings.Contains(lines[0], dir) || !strings.Contains(lines[0], "in use") {
		t.Errorf("the second historyd on %s: exit %d, log %q; want a non-zero exit and one line naming the directory", dir, code, lines)
	}
	waitServing(t, first)
}

// TestMigrateCommand: issue 14's `historyd migrate` on the shipped binary: a fresh directory gets
// version 1, a rerun is up to date, and a server then starts on it with --auto-migrate=false.
func TestMigrateCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	code, out, errOut := runCLI(t, nil, "migrate", "--data-dir", dir)
	if code != 0 || !strings.Contains(out, "applied migration 1\n") {
		t.Fatalf("historyd migrate on a fresh dir: exit %d, stdout %q, stderr %q; want 0 and version 1 applied", code, out, errOut)
	}
	code, out, errOut = runCLI(t, []string{"HISTORYD_DATA_DIR=" + dir}, "migrate")
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Errorf("historyd migrate again: exit %d, stdout %q, stderr %q; want 0 and up to date", code, out, errOut)
	}
	p := startSQLite(t, dir, "--auto-migrate=false")
	// While it serves, migrate is refused: the server holds the directory.
	if code, _, errOut := runCLI(t, nil, "migrate", "--data-dir", dir); code != 1 || !strings.Contains(errOut, dir) {
		t.Errorf("historyd migrate beside a server: exit %d, stderr %q; want 1 naming %s", code, errOut, dir)
	}
	stop(t, p, syscall.SIGTERM, startTimeout)
}
