//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// watchFrame is the part of a WatchBranch frame the check reads, as grpcurl prints it (protojson:
// lowerCamel names, 64-bit integers as strings).
type watchFrame struct {
	Start *struct {
		BranchID, Incarnation, AfterSequence, HeadSequence string
	}
	Commit *struct {
		FirstSequence, LastSequence string
		Events                      []struct {
			Sequence, Kind, Index string
			Message               *struct{ ID, Sequence string }
			Messages              []struct{ ID string }
		}
	}
	Heartbeat *struct{ HeadSequence string }
}

// TestWatchBranchConversation: issue 5 acceptance: grpcurl on historyd.v1.HistoryService/WatchBranch
// against the real binary receives the events of a concurrent docs/examples/conversation.sh run:
// every event from BRANCH_CREATED on, once and in order, the tool result's two events in one
// frame, each message as ListMessages shows it after the run, and at the deletion a final
// BRANCH_DELETED frame, then NOT_FOUND (ERROR_REASON_BRANCH_DELETED).
func TestWatchBranchConversation(t *testing.T) {
	p := startServer(t)
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var script bytes.Buffer
	conv := exec.CommandContext(ctx, "bash", filepath.Join(root, "docs", "examples", "conversation.sh"))
	conv.Env = append(os.Environ(), "HISTORYD_ADDR="+p.addr, "GRPCURL="+grpcurlBin)
	conv.Stdout, conv.Stderr = &script, &script
	if err := conv.Start(); err != nil {
		t.Fatal(err)
	}

	// Watch as soon as the script has created the branch; after_sequence 0 replays whatever it
	// wrote before the watch began, and the rest arrives live.
	client := historyv1.NewHistoryServiceClient(dial(t, p))
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := client.GetBranch(ctx, &historyv1.GetBranchRequest{BranchId: conversationBranch})
		if err == nil {
			break
		}
		if status.Code(err) != codes.NotFound {
			t.Fatalf("GetBranch: %v", err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("the conversation's branch never appeared:\n%s", script.String())
		}
	}
	var watchErr bytes.Buffer
	watched := &startWriter{started: make(chan struct{})}
	watch := exec.CommandContext(ctx, grpcurlBin, "-plaintext", "-format-error", "-d",
		`{"branch_id": "`+conversationBranch+`", "after_sequence": "0"}`, p.addr, "historyd.v1.HistoryService/WatchBranch")
	watch.Stdout, watch.Stderr = watched, &watchErr
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	if err := conv.Wait(); err != nil {
		t.Fatalf("conversation.sh: %v\n%s", err, script.String())
	}

	list, err := client.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: conversationBranch})
	if err != nil {
		t.Fatal(err)
	}
	// Delete only once grpcurl's watch has begun (its start frame is out): deleting before the
	// watch opened made it end NOT_FOUND with no frame at all (issue 13 item 14, a flake).
	select {
	case <-watched.started:
	case <-ctx.Done():
		t.Fatalf("grpcurl's watch printed no start frame: %q", watched.String())
	}
	del, err := client.DeleteBranch(ctx, &historyv1.DeleteBranchRequest{BranchId: conversationBranch})
	if err != nil {
		t.Fatal(err)
	}
	if err := watch.Wait(); err == nil {
		t.Errorf("grpcurl's watch ended with OK; a watch ends with the deletion's NOT_FOUND")
	}

	var frames []watchFrame
	dec := json.NewDecoder(strings.NewReader(watched.String()))
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("grpcurl printed %q: %v", watched.String(), err)
		}
		var f watchFrame
		if err := json.Unmarshal(raw, &f); err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	// -format-error prints the final status as JSON on stderr.
	var end struct {
		Code    codes.Code
		Details []struct {
			Reason   string
			Metadata map[string]string
		}
	}
	if err := json.Unmarshal(watchErr.Bytes(), &end); err != nil || end.Code != codes.NotFound || len(end.Details) != 1 ||
		end.Details[0].Reason != "ERROR_REASON_BRANCH_DELETED" || end.Details[0].Metadata["lastSequence"] != strconv.FormatUint(del.GetLastSequence(), 10) {
		t.Errorf("the watch ended with %s, want NOT_FOUND, ERROR_REASON_BRANCH_DELETED, lastSequence %d", watchErr.String(), del.GetLastSequence())
	}
	// protojson leaves out zero values: an absent afterSequence is 0.
	if len(frames) == 0 || frames[0].Start == nil || frames[0].Start.BranchID != conversationBranch || frames[0].Start.AfterSequence != "" {
		t.Fatalf("first frame %+v, want start after 0\n%s", frames, watched.String())
	}

	t.Logf("the watch replayed events up to %s and got the rest live", frames[0].Start.HeadSequence)

	// Every event once, in order, commits whole; the messages as the branch holds them now (none is
	// written twice but the tool call, whose second write is its action_response_id).
	want := map[string]string{} // message id -> sequence of its last write
	for _, m := range list.GetMessages() {
		want[m.GetId()] = strconv.FormatUint(m.GetSequence(), 10)
	}
	last := map[string]string{}
	var kinds []string
	next := uint64(1)
	for _, f := range frames[1:] {
		if f.Commit == nil {
			continue // a heartbeat
		}
		if len(f.Commit.Events) == 0 || f.Commit.Events[0].Sequence != f.Commit.FirstSequence ||
			f.Commit.Events[len(f.Commit.Events)-1].Sequence != f.Commit.LastSequence {
			t.Errorf("commit %+v is not whole", f.Commit)
		}
		for _, ev := range f.Commit.Events {
			if ev.Sequence != strconv.FormatUint(next, 10) {
				t.Fatalf("event %s where %d was due: a gap or a repeat\n%s", ev.Sequence, next, watched.String())
			}
			next++
			kinds = append(kinds, strings.TrimPrefix(ev.Kind, "EVENT_KIND_"))
			if ev.Message != nil {
				last[ev.Message.ID] = ev.Message.Sequence
			}
			for _, m := range ev.Messages {
				last[m.ID] = ev.Sequence
			}
		}
	}
	wantKinds := "BRANCH_CREATED MESSAGE_ADDED MESSAGE_ADDED MESSAGE_ADDED MESSAGE_ADDED MESSAGE_REPLACED BRANCH_DELETED"
	if got := strings.Join(kinds, " "); got != wantKinds {
		t.Errorf("event kinds %s, want %s", got, wantKinds)
	}
	if len(last) != len(want) {
		t.Errorf("the watch saw messages %v, the branch held %v", last, want)
	}
	for id, seq := range want {
		if last[id] != seq {
			t.Errorf("message %s: last written at %s by the watch, at %s by ListMessages", id, last[id], seq)
		}
	}
	var toolResult int
	for _, f := range frames {
		if f.Commit != nil && len(f.Commit.Events) == 2 {
			toolResult++
		}
	}
	if toolResult != 1 {
		t.Errorf("%d two-event frames, want one: the tool result (response and request together)", toolResult)
	}
}

// startWriter is grpcurl's stdout: it keeps what grpcurl prints and closes started once the watch's
// start frame has been printed.
type startWriter struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	started chan struct{}
	once    sync.Once
}

func (w *startWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), `"start"`) {
		w.once.Do(func() { close(w.started) })
	}
	return n, err
}

func (w *startWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
