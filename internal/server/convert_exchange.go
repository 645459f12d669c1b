package server

import (
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// reasonToProto maps every exchange drop reason to the wire enum (TestDeadLetterReasons checks
// that none is missing).
var reasonToProto = map[exchange.Reason]historyv1.DeadLetterReason{
	exchange.ReasonUnsetRecipient:   historyv1.DeadLetterReason_DEAD_LETTER_REASON_UNSET_RECIPIENT,
	exchange.ReasonUnknownRecipient: historyv1.DeadLetterReason_DEAD_LETTER_REASON_UNKNOWN_RECIPIENT,
	exchange.ReasonNotUUID:          historyv1.DeadLetterReason_DEAD_LETTER_REASON_NOT_A_UUID,
	exchange.ReasonRecipientLeft:    historyv1.DeadLetterReason_DEAD_LETTER_REASON_RECIPIENT_LEFT,
	exchange.ReasonInboxFull:        historyv1.DeadLetterReason_DEAD_LETTER_REASON_INBOX_FULL,
	exchange.ReasonNoRecipients:     historyv1.DeadLetterReason_DEAD_LETTER_REASON_NO_RECIPIENTS,
	exchange.ReasonMaxAttempts:      historyv1.DeadLetterReason_DEAD_LETTER_REASON_MAX_ATTEMPTS,
}

// flowToProto converts what a flow holds with o, its dead letters only when deadLetters is set.
func flowToProto(s *exchange.Snapshot, deadLetters bool, o messageOut) *historyv1.Flow {
	f, _ := flowWithin(s, deadLetters, o, -1)
	return f
}

// flowWithin converts what a flow holds with o, its dead letters only when deadLetters is set,
// entry by entry while the encoded flow stays within limit bytes (limit < 0: no limit). It stops
// at the first entry that passes the limit, so it never builds more than the limit and one entry,
// and returns a nil flow and a lower bound of its size (over limit) when the flow does not fit.
func flowWithin(s *exchange.Snapshot, deadLetters bool, o messageOut, limit int) (*historyv1.Flow, int) {
	f := &historyv1.Flow{OwnerId: s.Owner.String(), DeadLettersEvicted: s.DeadLettersEvicted}
	size := proto.Size(f)
	over := func(n int) bool { size += n; return limit >= 0 && size > limit }
	for _, m := range s.Outbox {
		pm := o.message(m)
		if over(entryBytes(proto.Size(pm))) {
			return nil, size
		}
		f.Outbox = append(f.Outbox, pm)
	}
	for _, in := range s.Inboxes {
		pin := &historyv1.Inbox{Sender: in.Sender.String()}
		// The inbox's length prefix is counted at its largest (openEntryBytes) as it grows.
		if over(openEntryBytes(proto.Size(pin))) {
			return nil, size
		}
		for _, m := range in.Messages {
			pm := o.message(m)
			if over(entryBytes(proto.Size(pm))) {
				return nil, size
			}
			pin.Messages = append(pin.Messages, pm)
		}
		f.Inboxes = append(f.Inboxes, pin)
	}
	if deadLetters {
		for _, dl := range s.DeadLetters {
			pdl := deadLetterToProto(dl, o)
			if over(entryBytes(proto.Size(pdl))) {
				return nil, size
			}
			f.DeadLetters = append(f.DeadLetters, pdl)
		}
	}
	return f, size
}

func deadLetterToProto(dl exchange.DeadLetter, o messageOut) *historyv1.DeadLetter {
	return &historyv1.DeadLetter{
		Message:   o.message(dl.Message),
		Recipient: participantToProto(dl.Recipient),
		Reason:    reasonToProto[dl.Reason],
		DeadAt:    timestamppb.New(dl.At),
		Attempts:  int32(dl.Attempts), // 0 but for ReasonMaxAttempts
	}
}

// leasedToProto converts one lease handed out by Lease or a leasing SubscribeInbox.
func leasedToProto(l exchange.Leased, o messageOut) *historyv1.LeasedMessage {
	return &historyv1.LeasedMessage{
		Message:  o.message(l.Message),
		Receipt:  l.Receipt.String(),
		Attempt:  int32(l.Receipt.Attempt),
		Deadline: timestamppb.New(l.Deadline),
	}
}

// leaseStateToProto is how a message stands with leases at now, for Receive: leased only while a
// lease holds it and its deadline is ahead (exchange_service.proto: unset while a Nack's delay
// hides it or once it is visible again, even if no one has taken it since).
func leaseStateToProto(li exchange.LeaseInfo, now time.Time) *historyv1.LeaseState {
	return &historyv1.LeaseState{
		Attempts:    int32(li.Attempts),
		VisibleTime: optionalTimestamp(li.VisibleAt),
		Leased:      li.Held && li.Hidden(now),
	}
}

// leaseStates are the wire lease states of page's messages at now, one each: nil for a message
// never leased (issue 18: Receive marks the leased messages, and only those).
func leaseStates(page exchange.ReceivedPage, now time.Time) []*historyv1.LeaseState {
	states := make([]*historyv1.LeaseState, len(page.Messages))
	for i, li := range page.Leases {
		if i < len(states) && li.Attempts > 0 {
			states[i] = leaseStateToProto(li, now)
		}
	}
	return states
}

// leaseEntryBytes is the encoded size of m's entry in ReceiveResponse.leases (a map entry: the
// message id as key, st as value), 0 without a state.
func leaseEntryBytes(m *envelope.Message, st *historyv1.LeaseState) int {
	if st == nil {
		return 0
	}
	entry := 1 + protowire.SizeBytes(len(m.ID.String())) + 1 + protowire.SizeBytes(proto.Size(st))
	return entryBytes(entry)
}

// optionalTimestamp is t on the wire, or unset for the zero time.
func optionalTimestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// deliveryToProto converts one message's delivery report; reached_owner_ids holds what the
// report kept (exchange.ReportOptions.OwnerIDs).
func deliveryToProto(d exchange.Delivery) *historyv1.MessageDelivery {
	md := &historyv1.MessageDelivery{MessageId: d.Message.ID.String(), ReachedCount: int32(d.ReachedCount)}
	for _, o := range d.Reached {
		md.ReachedOwnerIds = append(md.ReachedOwnerIds, o.String())
	}
	for _, dr := range d.Dropped {
		md.Drops = append(md.Drops, &historyv1.Drop{Recipient: participantToProto(dr.Recipient), Reason: reasonToProto[dr.Reason]})
	}
	return md
}

func ownerToProto(o exchange.OwnerInfo) *historyv1.Owner {
	return &historyv1.Owner{OwnerId: o.ID.String(), QueuedCount: int64(o.Queued), InboxCount: int64(o.Inbox)}
}
