package sqlite

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// Issue 14: "What persists is everything a client can observe": branches,
// messages exactly (ExportBranch after a restart is byte-identical to
// before), progressions, heads and the retained event log, idempotency
// records, and the incarnation, so a watch cursor from before a restart
// resumes after it with no gap.

func open(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := OpenStore(context.Background(), StoreConfig{Config: Config{Dir: dir, CacheKiB: 1024, Readers: 2}})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func tctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// conversation writes a branch with every kind of write the engine keeps.
func conversation(t *testing.T, s *Store) uuid.UUID {
	t.Helper()
	ctx := tctx(t)
	name := "restart"
	res, err := s.CreateBranch(ctx, store.CreateBranchInput{Name: &name, System: jsonv.StringValue("be brief"),
		Metadata: jsonv.ObjectValue(jsonv.Member{Key: "k", Value: jsonv.ArrayValue(jsonv.IntValue(1), jsonv.StringValue("1.50"))})})
	if err != nil {
		t.Fatal(err)
	}
	id := res.Branch.ID
	ins, err := s.AddMessage(ctx, id, store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue("hi"), Guidance: jsonv.StringValue("g")}}, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddMessage(ctx, id, store.AddInput{Factory: store.Factory{AssistantResponse: jsonv.StringValue("hello")}}, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	req, err := s.AddMessage(ctx, id, store.AddInput{Factory: store.Factory{ActionFunction: jsonv.StringValue("f"),
		ActionArguments: jsonv.ObjectValue(jsonv.Member{Key: "x", Value: jsonv.FloatValue(0.1)})}}, store.WriteOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateActionResponse(ctx, id, store.ActionResponseInput{Request: req.Message.Message.ID, Output: jsonv.IntValue(2),
		Sender: jsonv.NullValue(), Recipient: jsonv.NullValue()}, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Replace the instruction in place: the collections rank moves (issue 13 item 1).
	if _, err := s.AddMessage(ctx, id, store.AddInput{Target: &ins.Message.Message.ID, Factory: store.Factory{Guidance: jsonv.StringValue("g2")}}, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	order := []uuid.UUID{req.Message.Message.ID, ins.Message.Message.ID}
	if _, err := s.SetProgression(ctx, id, &order, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	return id
}

func exportAll(t *testing.T, s *Store, id uuid.UUID) map[envelope.Mode]string {
	t.Helper()
	out := map[envelope.Mode]string{}
	for _, mode := range []envelope.Mode{envelope.ModePython, envelope.ModeJSON, envelope.ModeDB} {
		e, err := s.ExportBranch(tctx(t), id, store.ExportInput{Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		out[mode] = string(jsonv.Marshal(e.Data))
	}
	return out
}

func TestRestartKeepsWhatClientsObserve(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	id := conversation(t, s)
	before := exportAll(t, s, id)
	infoBefore, err := s.GetBranch(tctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	pageBefore, err := s.ListMessages(tctx(t), id, store.ListInput{View: store.ViewActions})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	defer s.Close()
	after := exportAll(t, s, id)
	for mode, b := range before {
		if after[mode] != b {
			t.Errorf("ExportBranch(%v) after the restart differs:\nbefore %s\nafter  %s", mode, b, after[mode])
		}
	}
	infoAfter, err := s.GetBranch(tctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if infoAfter.Incarnation != infoBefore.Incarnation || infoAfter.HeadSequence != infoBefore.HeadSequence ||
		infoAfter.MessageCount != infoBefore.MessageCount || !infoAfter.Selected {
		t.Errorf("GetBranch after the restart = %+v, before %+v", infoAfter, infoBefore)
	}
	pageAfter, err := s.ListMessages(tctx(t), id, store.ListInput{View: store.ViewActions})
	if err != nil {
		t.Fatal(err)
	}
	if len(pageAfter.Messages) != 2 || len(pageBefore.Messages) != 2 {
		t.Fatalf("actions view: %d messages after, %d before; want 2", len(pageAfter.Messages), len(pageBefore.Messages))
	}
	for i := range pageAfter.Messages {
		if pageAfter.Messages[i].Sequence != pageBefore.Messages[i].Sequence || pageAfter.Messages[i].Message.ID != pageBefore.Messages[i].Message.ID {
			t.Errorf("actions view [%d] after the restart: %+v, before %+v", i, pageAfter.Messages[i], pageBefore.Messages[i])
		}
	}
}

// A watch cursor from before a restart resumes after it with no gap: the
// incarnation and the retained log are the database's.
func TestRestartWatchResumes(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	id := conversation(t, s)
	info, err := s.GetBranch(tctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	cursor := uint64(2) // after BRANCH_CREATED and the instruction
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	defer s.Close()
	if _, err := s.AddMessage(tctx(t), id, store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue("after")}}, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	sub, err := s.Subscribe(tctx(t), id, store.SubscribeInput{After: &cursor, Incarnation: &info.Incarnation})
	if err != nil {
		t.Fatalf("Subscribe with a cursor from before the restart: %v", err)
	}
	defer sub.Close()
	want := cursor + 1
	for want <= info.HeadSequence+1 {
		c, err := sub.Next(tctx(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range c {
			if ev.Sequence != want {
				t.Fatalf("event %d, want %d: a gap or a duplicate across the restart", ev.Sequence, want)
			}
			want++
		}
	}
}

// A repeated request id after a restart, within the window, returns the
// first response and writes nothing.
func TestRestartRemembersRequestIDs(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	created, err := s.CreateBranch(tctx(t), store.CreateBranchInput{RequestID: "create-1", Principal: "p"})
	if err != nil {
		t.Fatal(err)
	}
	id := created.Branch.ID
	first, err := s.AddMessage(tctx(t), id, store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue("once")}}, store.WriteOptions{RequestID: "add-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, dir)
	defer s.Close()
	again, err := s.AddMessage(tctx(t), id, store.AddInput{Factory: store.Factory{Instruction: jsonv.StringValue("twice")}}, store.WriteOptions{RequestID: "add-1"})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Message.Message.ID != first.Message.Message.ID || again.Head != first.Head {
		t.Errorf("the repeat after the restart: %+v, want the first response %+v replayed", again, first)
	}
	recreated, err := s.CreateBranch(tctx(t), store.CreateBranchInput{RequestID: "create-1", Principal: "p"})
	if err != nil || !recreated.Replayed || recreated.Branch.ID != id {
		t.Errorf("CreateBranch repeated after the restart: %+v, %v; want branch %s replayed", recreated.Branch, err, id)
	}
	info, err := s.GetBranch(tctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if info.HeadSequence != first.Head || info.MessageCount != 1 {
		t.Errorf("after the repeats: head %d, %d messages; want %d and 1 (nothing written)", info.HeadSequence, info.MessageCount, first.Head)
	}
}

// Issue 14: "nothing is replayed into memory at start (a test checks it
// structurally)": every message row is made unreadable behind the store's
// back, and the store still opens and describes the branch; only reading
// a message finds the damage.
func TestOpenReadsNoMessageRows(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	id := conversation(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", "file:"+filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE messages SET body = 'not JSON'`); err != nil {
		t.Fatal(err)
	}
	raw.Close()

	s = open(t, dir)
	defer s.Close()
	info, err := s.GetBranch(tctx(t), id)
	if err != nil || info.MessageCount != 5 {
		t.Fatalf("GetBranch after opening over unreadable messages: %+v, %v", info, err)
	}
	if _, err := s.ListMessages(tctx(t), id, store.ListInput{}); err == nil {
		t.Fatal("ListMessages read the damaged rows without an error: the test is not damaging what the store reads")
	}
}

// A deleted branch's event log goes: at once when no subscription reads
// it, else with the last one; what a stop leaves is swept at the next
// start, from the marks the deletes left, without scanning the log.
func TestDeletedLogSwept(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	id := conversation(t, s)
	info, err := s.GetBranch(tctx(t), id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.DeleteBranch(tctx(t), id, store.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir)
	defer s.Close()
	var events, marks int
	if err := s.db.read.QueryRow(`SELECT COUNT(*) FROM events WHERE incarnation = ?`, blob(info.Incarnation)).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if err := s.db.read.QueryRow(`SELECT COUNT(*) FROM store_meta WHERE key LIKE 'dead-incarnation:%'`).Scan(&marks); err != nil {
		t.Fatal(err)
	}
	if events != 0 || marks != 0 {
		t.Errorf("after the delete and a restart: %d events of the deleted incarnation and %d marks left, want 0 and 0", events, marks)
	}
}
