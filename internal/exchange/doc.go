// Package exchange is historyd's mailbox router, LionAGI's Exchange (ADR-0006 D5) in plain Go: one
// flow per registered owner (a UUID) holding an outbox and one inbox per sender, created on first
// delivery; Send queues a base Message in the sender's outbox, Collect routes it (direct, or a
// broadcast to a snapshot of the other owners), Receive peeks and PopMessage consumes.
//
// Beyond the record, without changing what it specifies (docs/design.md#exchange): Collect returns a delivery report, every message it drops is kept in the sender's
// bounded dead letters with its reason, Unregister returns what the owner still held (UnregisterIf
// removes the owner only if the caller can hand that on), Send takes an optional request id (a
// repeat queues nothing), limits bound outboxes and inboxes, empty inboxes of departed senders are
// reclaimed, live subscriptions see messages as they land, and an optional background collector
// pumps outboxes as LionAGI's Exchange.run does. A byte budget bounds everything it holds, request
// records included, and refuses Sends past it rather than drop anything (budget.go); live
// subscriptions are bounded in number; PopIf, like UnregisterIf, removes only what the caller can
// hand on. Beside PopMessage, acknowledged delivery (issue 18; the rules in lease.go): Lease hides
// messages for a visibility timeout behind a receipt, Ack removes them, Nack and expiry make them
// visible again, and max attempts makes them dead letters of the recipient.
//
// Locking is per owner, so collecting one owner never blocks sends, receives or pops of another:
// the registry lock is held only for O(1) map and slice operations (registry.go), each flow has its
// own mutex held only for queue operations, and a second per-flow mutex orders collects of one
// owner against each other and against its Unregister. The order, outermost first, is a flow's
// collect mutex, a flow's mutex, the registry lock; no goroutine holds two flows' mutexes.
// Subscribers are fed by non-blocking sends into bounded buffers; one that falls behind is evicted,
// never waited for.
//
// Import rule (docs/design.md#layers): exchange imports internal/envelope (and its jsonv) only among
// historyd's packages; it must not import internal/store, internal/server, gen/, cmd/ or grpc.
package exchange
