package server

import (
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/store"
)

// eventKindToProto and eventKindFromProto map the event kinds (docs/design.md#sequences); TestEventKindsMapped checks that every kind of each side has its row.
var (
	eventKindToProto = map[store.EventKind]historyv1.EventKind{
		store.EventBranchCreated:   historyv1.EventKind_EVENT_KIND_BRANCH_CREATED,
		store.EventMessageAdded:    historyv1.EventKind_EVENT_KIND_MESSAGE_ADDED,
		store.EventMessageReplaced: historyv1.EventKind_EVENT_KIND_MESSAGE_REPLACED,
		store.EventSystemSet:       historyv1.EventKind_EVENT_KIND_SYSTEM_SET,
		store.EventMessagesCleared: historyv1.EventKind_EVENT_KIND_MESSAGES_CLEARED,
		store.EventProgressionSet:  historyv1.EventKind_EVENT_KIND_PROGRESSION_SET,
		store.EventBranchDeleted:   historyv1.EventKind_EVENT_KIND_BRANCH_DELETED,
	}
	eventKindFromProto = invert(eventKindToProto)
)

func invert[K, V comparable](m map[K]V) map[V]K {
	out := make(map[V]K, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

// commitFrame converts one commit to a frame; its messages are rendered as out says (rendered only
// with the request's include_rendered, under the render cap).
func commitFrame(c store.Commit, out messageOut) *historyv1.WatchBranchResponse {
	return &historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Commit{Commit: commitToProto(c, out)}}
}

// commitFrameWithin is commitFrame measured as it is built: each event is counted as it is
// converted, and when the frame passes limit bytes (limit > 0) building stops there, so a commit
// far past the frame budget costs about the budget to refuse (issue 11 review). It returns the
// frame, or nil when it does not fit, and its size (when nil, the size reached, over limit).
func commitFrameWithin(c store.Commit, out messageOut, limit int) (*historyv1.WatchBranchResponse, int) {
	if limit <= 0 {
		frame := commitFrame(c, out)
		return frame, proto.Size(frame)
	}
	pb := &historyv1.BranchCommit{
		FirstSequence: c[0].CommitFirst,
		LastSequence:  c[len(c)-1].CommitLast,
		Events:        make([]*historyv1.BranchEvent, 0, len(c)),
	}
	// The commit's bounds, and the commit field's tag and length in the frame at their least (two
	// bytes): a lower bound of the frame's size, so that building stops only for a frame that
	// cannot fit; the caller checks the whole frame's size.
	size := proto.Size(pb) + 2
	for i := range c {
		ev := eventToProto(&c[i], out)
		size += fieldSize(3, proto.Size(ev))
		if size > limit {
			return nil, size
		}
		pb.Events = append(pb.Events, ev)
	}
	frame := &historyv1.WatchBranchResponse{Frame: &historyv1.WatchBranchResponse_Commit{Commit: pb}}
	return frame, proto.Size(frame)
}

// commitToProto converts a commit: its bounds and its events.
func commitToProto(c store.Commit, out messageOut) *historyv1.BranchCommit {
	pb := &historyv1.BranchCommit{
		FirstSequence: c[0].CommitFirst,
		LastSequence:  c[len(c)-1].CommitLast,
		Events:        make([]*historyv1.BranchEvent, len(c)),
	}
	for i := range c {
		pb.Events[i] = eventToProto(&c[i], out)
	}
	return pb
}

// eventToProto converts an event; its messages carry the event's sequence, the sequence of their
// last write as of the event.
func eventToProto(ev *store.Event, out messageOut) *historyv1.BranchEvent {
	pb := &historyv1.BranchEvent{Sequence: ev.Sequence, Kind: eventKindToProto[ev.Kind]}
	if ev.Message != nil {
		pb.Message = eventMessage(ev.Message, ev.Sequence, out)
		if ev.Index >= 0 {
			pb.Index = proto.Uint64(uint64(ev.Index))
		}
	}
	if ev.Branch != nil {
		pb.Branch = branchToProto(*ev.Branch)
	}
	if len(ev.Messages) > 0 {
		pb.Messages = make([]*historyv1.Message, len(ev.Messages))
		for i, m := range ev.Messages {
			pb.Messages[i] = eventMessage(m, ev.Sequence, out)
		}
	}
	if ev.Progression != nil {
		pb.Progression = &historyv1.MessageIds{Ids: make([]string, len(ev.Progression))}
		for i, id := range ev.Progression {
			pb.Progression.Ids[i] = id.String()
		}
	}
	return pb
}

func eventMessage(m *envelope.Message, seq uint64, out messageOut) *historyv1.Message {
	return out.stored(store.StoredMessage{Message: m, Sequence: seq})
}
