//go:build e2e

package e2e

import (
	"context"
	"errors"
	"maps"
	"slices"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// The crash harness's checker (crash_test.go): after a restart and the retries of the writes that
// were in flight at the kill, every write the server committed has been acknowledged, so the
// server must hold the model exactly. Each difference is a violation, counted as lost (an
// acknowledged write absent or at another sequence, a gap), duplicated (a write present twice, or
// something no acknowledged write made) or half-applied (a commit present in part).

// crashBranch is one branch as the restarted server reads it.
type crashBranch struct {
	msgs   []*historyv1.Message // ListMessages, in order
	replay *crashWatch          // the whole event log, replayed from 0
}

// check compares the server with the model and returns the branches it read, by id, for the
// watchers to compare with.
func (r *crashRun) check(ctx context.Context, c historyv1.HistoryServiceClient) map[string]*crashBranch {
	listed := map[string][]*historyv1.Branch{}
	for _, b := range listAllBranches(ctx, r, c) {
		listed[b.GetName()] = append(listed[b.GetName()], b)
	}
	read := map[string]*crashBranch{}
	for _, name := range slices.Sorted(maps.Keys(r.m.branches)) {
		b := r.m.branches[name]
		got := listed[name]
		switch {
		case b.id == "": // never acknowledged: its retry failed, which is reported already
		case b.deleted && len(got) > 0:
			r.violate(&r.lost, "branch %s (%s): its DeleteBranch was acknowledged, and it is listed", name, b.id)
		case b.deleted:
		case len(got) == 0:
			r.violate(&r.lost, "branch %s (%s): acknowledged, and not listed", name, b.id)
		case len(got) > 1:
			r.violate(&r.duplicated, "branch %s: listed %d times (%v); one write made it", name, len(got), got)
		case got[0].GetId() != b.id:
			r.violate(&r.lost, "branch %s: listed with id %s, acknowledged as %s", name, got[0].GetId(), b.id)
		default:
			if cb := r.checkBranch(ctx, c, b); cb != nil {
				read[b.id] = cb
			}
		}
	}
	for name, got := range listed {
		if _, ok := r.m.branches[name]; !ok {
			r.violate(&r.duplicated, "branch %s (%v): listed, and no write of the harness made it", name, got)
		}
	}
	return read
}

// listAllBranches pages through ListBranches.
func listAllBranches(ctx context.Context, r *crashRun, c historyv1.HistoryServiceClient) []*historyv1.Branch {
	var all []*historyv1.Branch
	token := ""
	for {
		page, err := c.ListBranches(ctx, &historyv1.ListBranchesRequest{PageSize: 1000, PageToken: token})
		if err != nil {
			r.t.Fatalf("ListBranches after the restart: %v", err)
		}
		all = append(all, page.GetBranches()...)
		if token = page.GetNextPageToken(); token == "" {
			return all
		}
	}
}

// checkBranch reads one live branch (its messages, its selected progression, its event log) and
// compares it with the model.
func (r *crashRun) checkBranch(ctx context.Context, c historyv1.HistoryServiceClient, b *mBranch) *crashBranch {
	list, err := c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: b.id, PageSize: 1000, OmitRendered: true})
	if err != nil {
		r.t.Fatalf("ListMessages(%s) after the restart: %v", b.name, err)
	}
	if list.GetNextPageToken() != "" {
		r.t.Fatalf("branch %s has more than 1000 messages: the harness bounds them at %d", b.name, crashMaxMessages)
	}
	replay := newCrashWatch(b)
	start, err := replay.open(ctx, c)
	if err == nil {
		err = replay.catchUp(start.GetHeadSequence())
	}
	replay.stream = nil
	var wv *watchViolation
	switch {
	case errors.As(err, &wv) && wv.duplicate:
		r.violate(&r.duplicated, "branch %s: %v", b.name, err)
	case err != nil:
		r.violate(&r.lost, "branch %s: the event log: %v", b.name, err)
	case start.GetHeadSequence() != list.GetHeadSequence():
		r.t.Fatalf("branch %s: head %d then %d with no write between", b.name, list.GetHeadSequence(), start.GetHeadSequence())
	}
	cb := &crashBranch{msgs: list.GetMessages(), replay: replay}
	r.checkMessages(b, cb.msgs)
	r.checkEvents(b, replay.events)
	r.checkActions(b, cb.msgs)
	if d := replay.agree(listedWatch(cb.msgs, replay.events)); d != "" {
		r.violate(&r.lost, "branch %s: its event log replayed from 0 disagrees with its messages: %s", b.name, d)
	}
	if b.hasProgression {
		sel, err := c.ListMessages(ctx, &historyv1.ListMessagesRequest{BranchId: b.id, PageSize: 1000, Selected: true, OmitRendered: true})
		if err != nil {
			r.t.Fatalf("ListMessages(%s, selected) after the restart: %v", b.name, err)
		}
		var ids []string
		for _, m := range sel.GetMessages() {
			ids = append(ids, m.GetId())
		}
		if !slices.Equal(ids, b.progression) {
			r.violate(&r.lost, "branch %s: selected progression %v, acknowledged %v", b.name, ids, b.progression)
		}
	}
	return cb
}

// listedWatch is the branch's messages in the form a watch rebuilds them, with the log's events.
func listedWatch(msgs []*historyv1.Message, events map[uint64]mEvent) *crashWatch {
	w := &crashWatch{events: events}
	for _, m := range msgs {
		w.msgs = append(w.msgs, wMsgOf(m))
	}
	return w
}

// checkMessages: every acknowledged message at its index with its sequence (a fork's clones: of
// the source's messages up to the fork point, whole), and no other message.
func (r *crashRun) checkMessages(b *mBranch, got []*historyv1.Message) {
	texts := map[string]bool{}
	for _, w := range b.msgs {
		texts[w.text] = w.text != ""
	}
	for i, m := range got {
		g := wMsgOf(m)
		w, ok := b.msgs[uint64(i)]
		switch {
		case !ok && b.fork:
			r.violate(&r.halfApplied, "fork %s: %d messages, want its source's %d up to the fork point", b.name, len(got), len(b.msgs))
			return
		case !ok && texts[m.GetInstruction().GetInstruction()]:
			r.violate(&r.duplicated, "branch %s: message %s at index %d (sequence %d) is a second copy of write %s", b.name,
				g.id, i, g.seq, m.GetInstruction().GetInstruction())
		case !ok:
			r.violate(&r.duplicated, "branch %s: message %s at index %d (sequence %d) was written by no acknowledged write", b.name, g.id, i, g.seq)
		case w.id == "" && g.cloneFrom != w.cloneFrom:
			r.violate(&r.halfApplied, "fork %s: index %d is a clone of %q, want of %s", b.name, i, g.cloneFrom, w.cloneFrom)
		case w.id != "" && g.id != w.id:
			r.violate(&r.lost, "branch %s: acknowledged message %s (sequence %d) is not at index %d (%s is)", b.name, w.id, w.seq, i, g.id)
		case g.seq != w.seq:
			r.violate(&r.lost, "branch %s: message %s at index %d has sequence %d, acknowledged %d", b.name, g.id, i, g.seq, w.seq)
		}
	}
	for _, i := range slices.Sorted(maps.Keys(b.msgs)) {
		if w := b.msgs[i]; i >= uint64(len(got)) {
			if b.fork {
				r.violate(&r.halfApplied, "fork %s: %d messages, want its source's %d up to the fork point", b.name, len(got), len(b.msgs))
				return
			}
			r.violate(&r.lost, "branch %s: acknowledged message %s (index %d, sequence %d) is missing: the branch has %d messages", b.name, w.id, i, w.seq, len(got))
		}
	}
}

// checkEvents: every acknowledged write's event at its sequence, and no other.
func (r *crashRun) checkEvents(b *mBranch, got map[uint64]mEvent) {
	for _, seq := range slices.Sorted(maps.Keys(b.events)) {
		if g, ok := got[seq]; !ok || g != b.events[seq] {
			r.violate(&r.lost, "branch %s: event %d is %v, acknowledged %v", b.name, seq, g, b.events[seq])
		}
	}
	for _, seq := range slices.Sorted(maps.Keys(got)) {
		if _, ok := b.events[seq]; !ok {
			r.violate(&r.duplicated, "branch %s: event %d (%v) was written by no acknowledged write", b.name, seq, got[seq])
		}
	}
}

// checkActions: an ActionResponse and its request's action_response_id, both or neither.
func (r *crashRun) checkActions(b *mBranch, msgs []*historyv1.Message) {
	byID := map[string]*historyv1.Message{}
	for _, m := range msgs {
		byID[m.GetId()] = m
	}
	for _, m := range msgs {
		if resp := m.GetActionResponse(); resp != nil {
			req := byID[resp.GetActionRequestId()]
			if req.GetActionRequest().GetActionResponseId() != m.GetId() {
				r.violate(&r.halfApplied, "branch %s: ActionResponse %s answers %s, whose action_response_id is %q", b.name, m.GetId(),
					resp.GetActionRequestId(), req.GetActionRequest().GetActionResponseId())
			}
		}
		if id := m.GetActionRequest().GetActionResponseId(); id != "" {
			if byID[id].GetActionResponse().GetActionRequestId() != m.GetId() {
				r.violate(&r.halfApplied, "branch %s: ActionRequest %s names response %s, which is not there to answer it", b.name, m.GetId(), id)
			}
		}
	}
}
