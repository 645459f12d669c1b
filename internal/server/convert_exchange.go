package server

import (
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
}

// messagesToProto converts messages in order.
func messagesToProto(msgs []*envelope.Message) []*historyv1.Message {
	out := make([]*historyv1.Message, len(msgs))
	for i, m := range msgs {
		out[i] = messageToProto(m)
	}
	return out
}

// flowToProto converts what a flow holds, its dead letters only when deadLetters is set.
func flowToProto(s *exchange.Snapshot, deadLetters bool) *historyv1.Flow {
	f := &historyv1.Flow{
		OwnerId:            s.Owner.String(),
		Outbox:             messagesToProto(s.Outbox),
		DeadLettersEvicted: s.DeadLettersEvicted,
	}
	for _, in := range s.Inboxes {
		f.Inboxes = append(f.Inboxes, &historyv1.Inbox{Sender: in.Sender.String(), Messages: messagesToProto(in.Messages)})
	}
	if deadLetters {
		for _, dl := range s.DeadLetters {
			f.DeadLetters = append(f.DeadLetters, deadLetterToProto(dl))
		}
	}
	return f
}

func deadLetterToProto(dl exchange.DeadLetter) *historyv1.DeadLetter {
	return &historyv1.DeadLetter{
		Message:   messageToProto(dl.Message),
		Recipient: participantToProto(dl.Recipient),
		Reason:    reasonToProto[dl.Reason],
		DeadAt:    timestamppb.New(dl.At),
	}
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
