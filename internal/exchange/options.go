package exchange

import (
	"time"

	"github.com/google/uuid"
)

// Defaults of the options. Each bound keeps one owner from holding unbounded memory in this
// in-memory service; the values are generous for agents that collect and pop regularly.
const (
	// DefaultMaxOutbox is the default bound on messages queued in one owner's outbox: ten thousand
	// uncollected sends means the owner is not collecting, and Send should say so.
	DefaultMaxOutbox = 10_000
	// DefaultMaxInbox is the default bound on messages in one inbox (one sender's messages to one
	// owner); past it, deliveries become dead letters with reason inbox full.
	DefaultMaxInbox = 10_000
	// DefaultMaxDeadLetters is the default bound on the dead letters kept per owner; older ones are
	// evicted first and counted.
	DefaultMaxDeadLetters = 1_000
	// DefaultSubscriberBuffer is the default number of messages a live subscription may have
	// pending before it is evicted: enough to absorb a collect of a few hundred messages while the
	// stream writes to a healthy client.
	DefaultSubscriberBuffer = 256
	// DefaultSubscriberBufferBytes is the default bound on the bytes (the byte budget's estimate)
	// of the messages a live subscription may have pending before it is evicted. The count alone
	// let a SubscribeInbox stream that never reads pin 256 messages of up to 4 MiB, about 1 GiB.
	// 2 MiB is the count's 256 messages of up to about 8 KB, so the count still binds first for
	// ordinary traffic: a first version at 64 KiB evicted every live subscriber on a collect of
	// about 40 messages of 1 KB (its review), which the reader cannot drain while the collect is
	// offered. DefaultMaxSubscriptions of them hold at most 2 GiB: a small container lowers the
	// stream cap or this (README.md, "Memory per stream"). A larger message is still taken into an
	// empty buffer, so a reader that keeps up gets it live.
	DefaultSubscriberBufferBytes = 2 << 20
	// DefaultRequestTTL is how long Send remembers a request id (docs/design.md#branches, the
	// idempotency rule: 10 minutes).
	DefaultRequestTTL = 10 * time.Minute
	// DefaultRequestsPerSender is how many request ids Send remembers per sender (
	// docs/design.md#branches, the idempotency rule: the last 10,000 requests).
	DefaultRequestsPerSender = 10_000
	// DefaultMaxSubscriptions is the default bound on live inbox subscriptions (SubscribeInbox
	// streams) across the Exchange: 1,000, as WatchBranch's --watch-max-streams; each costs a
	// goroutine or two and a buffer of DefaultSubscriberBuffer pointers.
	DefaultMaxSubscriptions = 1_000
	// DefaultByteBudget is the default bound on the bytes of mail the Exchange holds (outboxes,
	// inboxes, dead letters, remembered requests): 256 MiB, a quarter of the history store's
	// default memory budget, thousands of ordinary agent messages
	// (docs/decisions/0011-exchange-byte-budget.md).
	DefaultByteBudget = 256 << 20
	// MaxRequestIDLength bounds a request id, so a client cannot make the server remember megabytes
	// per request; a UUID (36 bytes) is the recommended form (AIP-155).
	MaxRequestIDLength = 256
)

// Option configures an Exchange built by New.
type Option func(*options)

type options struct {
	maxOutbox, maxInbox, maxDeadLetters int
	subscriberBuffer                    int
	subscriberBufferBytes               int64
	requestTTL                          time.Duration
	requestsPerSender                   int
	byteBudget                          int64
	maxSubscriptions                    int
	background                          bool
	now                                 func() time.Time
	onPanic                             func(any)
	onCollectFailure                    func(owner uuid.UUID, err error)
	maxAttempts                         int
	visibility                          time.Duration
}

func defaultOptions() options {
	return options{
		maxOutbox:         DefaultMaxOutbox,
		maxInbox:          DefaultMaxInbox,
		maxDeadLetters:    DefaultMaxDeadLetters,
		subscriberBuffer:  DefaultSubscriberBuffer,
		requestTTL:        DefaultRequestTTL,
		requestsPerSender: DefaultRequestsPerSender,
		byteBudget:        DefaultByteBudget,
		maxSubscriptions:  DefaultMaxSubscriptions,
		now:               time.Now,
		maxAttempts:       DefaultMaxAttempts,
		visibility:        DefaultVisibility,
	}
}

// WithMaxOutbox bounds the messages queued in one owner's outbox; Send answers ErrOutboxFull past
// it. The default is DefaultMaxOutbox; n <= 0 means no bound.
func WithMaxOutbox(n int) Option { return func(o *options) { o.maxOutbox = n } }

// WithMaxInbox bounds the messages held in one inbox (one sender's messages to one owner); a
// delivery past it becomes a dead letter of the sender with reason ReasonInboxFull. The default is
// DefaultMaxInbox; n <= 0 means no bound.
func WithMaxInbox(n int) Option { return func(o *options) { o.maxInbox = n } }

// WithMaxDeadLetters bounds the dead letters kept per owner; the oldest are evicted first and
// counted (ListDeadLetters reports the count). The list is always bounded (docs/design.md#exchange:
// "The dead-letter list is bounded per owner"): the default is DefaultMaxDeadLetters, and n < 1
// means 1.
func WithMaxDeadLetters(n int) Option { return func(o *options) { o.maxDeadLetters = max(n, 1) } }

// WithSubscriberBuffer sets how many messages a subscription may have pending before it is evicted
// with ErrSubscriberTooSlow. The default is DefaultSubscriberBuffer; n < 1 means 1.
func WithSubscriberBuffer(n int) Option { return func(o *options) { o.subscriberBuffer = max(n, 1) } }

// WithSubscriberBufferBytes sets how many bytes of messages (by the byte budget's estimate) a
// subscription may have pending before it is evicted with ErrSubscriberTooSlow; a message larger
// than it is still taken when nothing is pending. The default is DefaultSubscriberBufferBytes;
// n <= 0 means the default.
func WithSubscriberBufferBytes(n int64) Option {
	return func(o *options) { o.subscriberBufferBytes = n } // n <= 0: NewSubscription takes the default
}

// WithRequestMemory sets how long and how many Send request ids are remembered per sender. The
// defaults are DefaultRequestTTL and DefaultRequestsPerSender (docs/design.md#branches, the
// idempotency rule); n < 1 means 1.
func WithRequestMemory(ttl time.Duration, n int) Option {
	return func(o *options) { o.requestTTL, o.requestsPerSender = ttl, max(n, 1) }
}

// WithByteBudget bounds the estimated heap bytes of the mail the Exchange holds: messages in
// outboxes, inboxes and dead letters, and the requests Send remembers. A Send that would take the
// total past it fails with a *BudgetError (ErrBudgetExceeded) and queues nothing; nothing held is
// ever dropped to make room. The default is DefaultByteBudget; n <= 0 means no bound.
func WithByteBudget(n int64) Option { return func(o *options) { o.byteBudget = max(n, 0) } }

// WithMaxSubscriptions bounds the live subscriptions across the Exchange; Subscribe past it is
// ErrTooManySubscriptions. The default is DefaultMaxSubscriptions; n <= 0 means no bound.
func WithMaxSubscriptions(n int) Option { return func(o *options) { o.maxSubscriptions = n } }

// WithBackgroundCollection starts a goroutine that collects every owner with queued messages soon
// after each Send, as LionAGI's Exchange.run pumps sync() in a loop. The default is off, so that
// the explicit Collect of ADR-0006 D5 stays observable; Close stops the goroutine (and Send).
func WithBackgroundCollection(on bool) Option { return func(o *options) { o.background = on } }

// WithClock sets the clock that stamps dead letters and ages request ids; tests use it. The
// default is time.Now.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// WithPanicHandler sets the function that receives the value of a panic the background collector
// recovered from (a bug; the loop keeps running). cmd/historyd logs it. The default ignores it.
func WithPanicHandler(f func(any)) Option { return func(o *options) { o.onPanic = f } }

// WithCollectFailureHandler sets the function told when the background collector's collect of an
// owner fails (a database engine's fault or damaged row; the memory engine's collect cannot fail):
// the collector retries with backoff, and without the report the failure would repeat unseen.
// It is called at most once per owner per CollectFailureReportEvery, on the Exchange's clock.
// cmd/historyd logs a warning with the owner and the error. The default ignores it.
func WithCollectFailureHandler(f func(owner uuid.UUID, err error)) Option {
	return func(o *options) { o.onCollectFailure = f }
}

// CollectFailureReportEvery is how often, at most, WithCollectFailureHandler's function hears of
// one owner's failing background collects: a collect retried every few seconds for hours would
// otherwise write thousands of identical lines.
const CollectFailureReportEvery = time.Minute
