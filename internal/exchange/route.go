package exchange

import (
	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// RouteDirect is the routing decision for a direct message (recipient not None), shared by every
// engine so that the rule is written once (ADR-0006 D5): only a UUID that is a registered owner at
// delivery is delivered (to, true); anything else is dropped with its reason. registered says
// whether an owner is registered now; wasRegistered whether the recipient was when the message was
// sent (a drop then says "recipient left" rather than "unknown recipient").
func RouteDirect(rcpt envelope.Participant, registered func(uuid.UUID) bool, wasRegistered bool) (to uuid.UUID, deliver bool, reason Reason) {
	switch rcpt.Kind() {
	case envelope.ParticipantRole:
		if role, _ := rcpt.Role(); role == envelope.RoleUnset {
			return uuid.Nil, false, ReasonUnsetRecipient
		}
		return uuid.Nil, false, ReasonNotUUID
	case envelope.ParticipantID:
		id, _ := rcpt.ID()
		switch {
		case registered(id):
			return id, true, 0
		case wasRegistered:
			return id, false, ReasonRecipientLeft
		default:
			return id, false, ReasonUnknownRecipient
		}
	}
	return uuid.Nil, false, ReasonNotUUID // a plain string, or None (broadcasts are routed apart)
}

// BroadcastDrop is the drop of a broadcast that reached no one and was dropped for no one (vector
// "broadcast": a solo owner's broadcast delivers 0).
func BroadcastDrop() Drop { return Drop{Recipient: envelope.None(), Reason: ReasonNoRecipients} }
