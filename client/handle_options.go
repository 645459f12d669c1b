package client

import "time"

// HandleOption configures HandleInbox.
type HandleOption func(*handleOptions)

type handleOptions struct {
	concurrency  int
	sender       *string
	visibility   time.Duration
	nackDelay    time.Duration
	drain        time.Duration
	omitRendered bool
	retry        RetryPolicy
	onLeaseError func(*LeaseError)
	onResume     func(Resume)
}

// Bounds of HandleInbox's options.
const (
	// MaxHandleConcurrency is the most handlers HandleInbox runs at once: the server's bound on a
	// leasing stream's max_in_flight.
	MaxHandleConcurrency = 1000
	// DefaultHandleDrain is how long HandleInbox waits for running handlers once its context
	// ended, unless HandleDrain says otherwise.
	DefaultHandleDrain = 10 * time.Second
)

func defaultHandleOptions() handleOptions {
	return handleOptions{concurrency: 1, drain: DefaultHandleDrain, retry: DefaultWatchRetry}
}

// HandleConcurrency runs up to n handlers at once (1 to MaxHandleConcurrency; the default is 1,
// one message at a time in Receive's order). It is also the stream's max_in_flight: the server
// leases to the stream only while fewer than n of the owner's messages (in the stream's scope) are
// leased, so no leased message waits for a handler.
func HandleConcurrency(n int) HandleOption {
	return func(o *handleOptions) { o.concurrency = min(max(n, 1), MaxHandleConcurrency) }
}

// HandleSender handles the messages of one sender's inbox only (SubscribeInboxRequest.sender).
func HandleSender(sender string) HandleOption {
	return func(o *handleOptions) { o.sender = &sender }
}

// HandleVisibility sets the lease length of the stream's leases and of each extension. Without it
// the leases have the owner's visibility timeout (set at Register, else the server's
// --exchange-visibility-timeout), and an extension asks for the length the lease was handed out
// with (its deadline less the server's time, which heartbeats tell).
func HandleVisibility(d time.Duration) HandleOption {
	return func(o *handleOptions) { o.visibility = d }
}

// HandleNackDelay hides a message whose handler failed for d before it is visible again (Nack's
// delay; the default 0 makes it visible at once). Its attempt counts either way: after the owner's
// max_attempts it is a dead letter (DEAD_LETTER_REASON_MAX_ATTEMPTS).
func HandleNackDelay(d time.Duration) HandleOption {
	return func(o *handleOptions) { o.nackDelay = d }
}

// HandleDrain bounds how long HandleInbox waits, once its context ended or the stream failed for
// good, for the handlers still running to return and their messages to be acknowledged or nacked
// (DefaultHandleDrain). Past it the handlers' context is canceled and their messages are left to
// their leases' deadlines.
func HandleDrain(d time.Duration) HandleOption {
	return func(o *handleOptions) { o.drain = max(d, 0) }
}

// HandleOmitRendered leaves each leased message's rendered field unset: smaller frames, and a
// message whose rendering would not fit the server's response budget can still be handled.
func HandleOmitRendered() HandleOption {
	return func(o *handleOptions) { o.omitRendered = true }
}

// HandleRetry bounds the stream's resumptions as WithWatchRetry bounds Watch's (DefaultWatchRetry):
// MaxAttempts resumptions in a row that deliver nothing before HandleInbox gives up.
func HandleRetry(p RetryPolicy) HandleOption {
	return func(o *handleOptions) { o.retry = p }
}

// OnLeaseError calls f with each failed Ack, Nack or ExtendLease (for logs and metrics); the loop
// goes on. f may be called from several goroutines at once and must not block for long.
func OnLeaseError(f func(*LeaseError)) HandleOption {
	return func(o *handleOptions) { o.onLeaseError = f }
}

// OnHandleResume calls f before each resumption of the leasing stream, with the error that ended
// the previous one and the attempt number (Resume.After is 0: a leasing stream has no cursor).
// f runs on HandleInbox's goroutine and must not block for long.
func OnHandleResume(f func(Resume)) HandleOption {
	return func(o *handleOptions) { o.onResume = f }
}
