package client

import (
	"crypto/tls"
	"time"

	"google.golang.org/grpc"
)

// Option configures Dial.
type Option func(*options)

// options are Dial's settings; defaultOptions documents the defaults.
type options struct {
	tls         *tls.Config // nil with insecure
	insecure    bool
	token       string
	retry       RetryPolicy
	dialOptions []grpc.DialOption
}

func defaultOptions() options {
	return options{tls: &tls.Config{MinVersion: tls.VersionTLS12}, retry: DefaultRetryPolicy}
}

// WithInsecure connects without TLS, as to a historyd started with the defaults (`make run`).
func WithInsecure() Option {
	return func(o *options) { o.insecure, o.tls = true, nil }
}

// WithTLS connects with TLS configured by cfg (server name, roots, a client certificate for mutual
// TLS). The default, without WithInsecure or WithTLS, is TLS 1.2 or newer with the system roots.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) { o.insecure, o.tls = false, cfg }
}

// WithToken sends `authorization: Bearer <token>` on every call, for a server started with auth
// tokens. Over an insecure connection the token travels in clear text; the client allows it (for
// tests and loopback) rather than refuse.
func WithToken(token string) Option {
	return func(o *options) { o.token = token }
}

// WithRetry replaces the retry policy (DefaultRetryPolicy); a policy with MaxAttempts 1 turns
// retries off.
func WithRetry(p RetryPolicy) Option {
	return func(o *options) { o.retry = p }
}

// WithDialOptions adds grpc.DialOptions (keepalive, window sizes, a custom dialer, interceptors run
// inside the retry interceptor, so once per attempt).
func WithDialOptions(opts ...grpc.DialOption) Option {
	return func(o *options) { o.dialOptions = append(o.dialOptions, opts...) }
}

// RetryPolicy bounds the retries of unary calls.
type RetryPolicy struct {
	// MaxAttempts is the number of attempts, the first included; 1 or less means no retry.
	MaxAttempts int
	// InitialBackoff is the pause before the second attempt; each later pause is Multiplier times
	// the previous one, at most MaxBackoff, and every pause is jittered by ±Jitter of itself.
	InitialBackoff time.Duration
	// MaxBackoff bounds one pause; 0 means no bound (MaxAttempts still bounds the retries).
	MaxBackoff time.Duration
	// Multiplier grows the pause between attempts; less than 1 means 1.
	Multiplier float64
	// Jitter is the fraction (0 to 1) by which each pause varies at random, so that clients cut
	// off together do not come back together.
	Jitter float64
	// PerAttemptTimeout, when positive, bounds each attempt; an attempt that runs out is
	// DEADLINE_EXCEEDED and retried while the caller's context still has time. 0 means none: each
	// attempt has what is left of the caller's deadline.
	PerAttemptTimeout time.Duration
}

// DefaultRetryPolicy is the policy Dial uses without WithRetry: 5 attempts, pauses of 50 ms
// doubling to at most 2 s (about 3.5 s of pauses in all, enough to ride out a server restart),
// ±20% jitter, no per-attempt timeout.
var DefaultRetryPolicy = RetryPolicy{
	MaxAttempts:    5,
	InitialBackoff: 50 * time.Millisecond,
	MaxBackoff:     2 * time.Second,
	Multiplier:     2,
	Jitter:         0.2,
}
