package exchange

import (
	"time"

	"github.com/google/uuid"
)

// Settings are the options an Exchange is built with, resolved: the database engines
// (internal/store/exchangedb) take the same Options as New and read them here, so one set of
// --exchange-* flags configures every engine.
type Settings struct {
	// MaxOutbox, MaxInbox and MaxDeadLetters are the per-owner bounds (<= 0: none, except
	// MaxDeadLetters, at least 1).
	MaxOutbox, MaxInbox, MaxDeadLetters int
	// SubscriberBuffer is a subscription's buffer (at least 1), SubscriberBufferBytes its bound
	// in bytes (<= 0: NewSubscription's default).
	SubscriberBuffer      int
	SubscriberBufferBytes int64
	// RequestTTL and RequestsPerSender are Send's request memory.
	RequestTTL        time.Duration
	RequestsPerSender int
	// ByteBudget is the memory engine's byte budget; the database engines do not use it
	// (common17: they are bounded by the per-owner bounds and the database's size limit).
	ByteBudget int64
	// MaxSubscriptions bounds the live subscriptions (<= 0: none).
	MaxSubscriptions int
	// Background starts the background collector.
	Background bool
	// Now is the clock; OnPanic receives what the background collector recovered from (may be nil).
	Now     func() time.Time
	OnPanic func(any)
	// OnCollectFailure hears of a background collect that failed (WithCollectFailureHandler; may
	// be nil).
	OnCollectFailure func(owner uuid.UUID, err error)
	// MaxAttempts and Visibility are the OwnerSettings of an owner registered without them
	// (WithLeaseDefaults).
	MaxAttempts int
	Visibility  time.Duration
}

// ResolveOptions applies opts to the defaults New uses and returns the result.
func ResolveOptions(opts ...Option) Settings {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	return Settings{
		MaxOutbox: o.maxOutbox, MaxInbox: o.maxInbox, MaxDeadLetters: max(o.maxDeadLetters, 1),
		SubscriberBuffer: max(o.subscriberBuffer, 1), SubscriberBufferBytes: o.subscriberBufferBytes, RequestTTL: o.requestTTL,
		RequestsPerSender: max(o.requestsPerSender, 1), ByteBudget: o.byteBudget,
		MaxSubscriptions: o.maxSubscriptions, Background: o.background, Now: o.now, OnPanic: o.onPanic,
		OnCollectFailure: o.onCollectFailure,
		MaxAttempts:      o.maxAttempts, Visibility: o.visibility,
	}
}
