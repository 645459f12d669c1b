package server

import (
	"errors"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

// Defaults of Limits. Each protects the server from a client that is broken or hostile, and each is
// generous for a well-behaved one.
const (
	// DefaultMaxRecvMsgSize is grpc-go's own default, 4 MiB: thousands of ordinary messages; a larger
	// request (a whole-branch ImportBranch, say) is refused with RESOURCE_EXHAUSTED before it is
	// read into memory. Raise it for bigger imports.
	DefaultMaxRecvMsgSize = 4 << 20
	// DefaultMaxConcurrentStreams caps the calls one connection may have open at once (HTTP/2
	// SETTINGS_MAX_CONCURRENT_STREAMS): 100 is the value RFC 9113 recommends as the minimum to allow
	// and what most servers advertise. A gRPC client queues calls beyond it; it does not fail them.
	DefaultMaxConcurrentStreams = 100
	// DefaultStreamWorkers keeps 128 goroutines serving calls. A goroutine made for one call starts
	// with a small stack and grows it through the interceptor chain, conversion and the store on
	// every call (18% of the server's CPU under AddMessage load, in runtime.newstack); a worker
	// keeps its grown stack from call to call. 128 covers the calls two cores run at once with room
	// to spare, for a few MiB of stacks; beyond it, calls get goroutines of their own as before.
	DefaultStreamWorkers = 128
	// MaxStreamWorkers is the most StreamWorkers Validate allows: each worker is a goroutine that
	// keeps the stack its calls grew (tens of KiB), started with the server; 1024 serve far more
	// calls at once than the cores run, and beyond the workers a call gets a goroutine of its own.
	// 4294967295 workers (--stream-workers had no maximum) killed the process at start with OOM.
	MaxStreamWorkers = 1024
	// MaxMaxAppendWindow is the most MaxAppendWindow Validate allows: each AppendMessages stream
	// allocates its window's queue when it opens (65536 items of about 40 bytes = 2.5 MiB), so one
	// call could allocate any larger window whole; the in-flight budget bounds what they hold.
	MaxMaxAppendWindow = 65536
	// DefaultKeepaliveMinTime is the shortest interval between client pings the server tolerates;
	// a client that pings more often is sent GOAWAY (too_many_pings). 10 s allows the keepalive
	// settings of any reasonable client and stops a ping flood at its third ping.
	DefaultKeepaliveMinTime = 10 * time.Second
	// DefaultMaxConnectionIdle closes a connection that has had no open call for 15 minutes, freeing
	// what abandoned clients hold; a client reconnects transparently on its next call.
	DefaultMaxConnectionIdle = 15 * time.Minute
	// DefaultKeepaliveTime and DefaultKeepaliveTimeout: the server pings a connection idle for 2
	// minutes and closes it if the ping is not answered within 20 seconds, so a client that vanished
	// without closing its TCP connection (and its watch streams) is noticed in minutes, not hours.
	DefaultKeepaliveTime    = 2 * time.Minute
	DefaultKeepaliveTimeout = 20 * time.Second
	// maxHeaderListSize bounds the request metadata a client may send. Historyd reads only the
	// authorization and x-request-id headers; 64 KiB is far above what any proxy adds.
	maxHeaderListSize = 64 << 10
	// connectionTimeout bounds the TLS and HTTP/2 handshake of a new connection, so that a client
	// that connects and sends nothing (or garbage) does not hold a connection for grpc-go's default
	// two minutes.
	connectionTimeout = 10 * time.Second
)

// Limits are the transport limits the server enforces on every connection. A zero MaxConnectionAge
// or MaxConnectionAgeGrace means no limit; every other field must be positive, except
// KeepalivePermitWithoutStream and those whose zero means their default or none. StreamWorkers
// and MaxAppendWindow, allocated whole, have maxima.
type Limits struct {
	// MaxRecvMsgSize is the largest request message in bytes; a larger one is RESOURCE_EXHAUSTED.
	MaxRecvMsgSize int
	// MaxConcurrentStreams is the most calls one connection may have open at once.
	MaxConcurrentStreams uint32
	// KeepaliveMinTime is the shortest interval between client pings; more frequent pings get the
	// connection closed with GOAWAY (ENHANCE_YOUR_CALM, too_many_pings).
	KeepaliveMinTime time.Duration
	// KeepalivePermitWithoutStream allows client pings on a connection with no open call; when false
	// (the default) such pings count as abuse, like pings that come too often.
	KeepalivePermitWithoutStream bool
	// KeepaliveTime and KeepaliveTimeout: the server pings a connection idle for KeepaliveTime and
	// closes it when the ping is not answered within KeepaliveTimeout.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// MaxConnectionIdle closes a connection that has had no open call for this long.
	MaxConnectionIdle time.Duration
	// MaxConnectionAge closes any connection this old (with GOAWAY, so clients reconnect without
	// failing calls), once MaxConnectionAgeGrace more has passed for its open calls; open watch and
	// inbox streams then end and resume from their cursors. Zero: no limit.
	MaxConnectionAge      time.Duration
	MaxConnectionAgeGrace time.Duration
	// StreamWorkers is the number of long-lived goroutines that serve calls (grpc.NumStreamWorkers);
	// a call that finds them all busy gets a goroutine of its own. 0: a new goroutine per call; at
	// most MaxStreamWorkers.
	StreamWorkers uint32
	// MaxConnections is the most client connections open at once; one past it is closed as soon as
	// it is accepted (connlimit.go).
	MaxConnections int
	// MaxInflightBytes bounds the request bytes of the calls in progress: each call reserves
	// MaxRecvMsgSize when its headers arrive, and one that does not fit is RESOURCE_EXHAUSTED before
	// its body is read (inflight_budget.go). It must be at least MaxRecvMsgSize.
	MaxInflightBytes int64
	// MaxResponseBytes is the response budget (--max-response-bytes): the largest unary response
	// and stream frame; pages are cut short to fit, a response that cannot be is RESOURCE_EXHAUSTED
	// (RESPONSE_TOO_LARGE). 0: DefaultMaxResponseBytes.
	MaxResponseBytes int
	// MaxRenderedBytes caps one message's rendered text (--max-rendered-bytes); it must not exceed
	// MaxResponseBytes. 0: DefaultMaxRenderedBytes.
	MaxRenderedBytes int
	// MaxImportBytes bounds one ImportBranchStream payload (--max-import-bytes). 0:
	// DefaultMaxImportBytes.
	MaxImportBytes int
	// MaxAppendWindow caps the window of an AppendMessages stream, the items it may have in flight
	// (--append-max-window). 0: DefaultAppendMaxWindow; at most MaxMaxAppendWindow.
	MaxAppendWindow int
	// RequestBodyTimeout bounds how long a call that reserves from the in-flight budget (unary,
	// client-streaming, bidirectional) may take from its headers to its first request message
	// (--request-body-timeout); past it the call ends DEADLINE_EXCEEDED and gives its reservation
	// back (recv_timeout.go). 0: DefaultRequestBodyTimeout.
	RequestBodyTimeout time.Duration
	// StreamIdleTimeout bounds how long such a stream's handler may wait for its next request
	// message (--stream-idle-timeout), the reservation held all along; past it the stream ends
	// DEADLINE_EXCEEDED. 0: DefaultStreamIdleTimeout.
	StreamIdleTimeout time.Duration
}

// DefaultLimits returns the limits a Server has unless WithLimits says otherwise.
func DefaultLimits() Limits {
	return Limits{
		MaxRecvMsgSize:       DefaultMaxRecvMsgSize,
		MaxConcurrentStreams: DefaultMaxConcurrentStreams,
		KeepaliveMinTime:     DefaultKeepaliveMinTime,
		KeepaliveTime:        DefaultKeepaliveTime,
		KeepaliveTimeout:     DefaultKeepaliveTimeout,
		MaxConnectionIdle:    DefaultMaxConnectionIdle,
		StreamWorkers:        DefaultStreamWorkers,
		MaxConnections:       DefaultMaxConnections,
		MaxInflightBytes:     DefaultMaxInflightBytes,
		MaxResponseBytes:     DefaultMaxResponseBytes,
		MaxRenderedBytes:     DefaultMaxRenderedBytes,
		MaxImportBytes:       DefaultMaxImportBytes,
		MaxAppendWindow:      DefaultAppendMaxWindow,
		RequestBodyTimeout:   DefaultRequestBodyTimeout,
		StreamIdleTimeout:    DefaultStreamIdleTimeout,
	}
}

// ErrInvalidLimits is wrapped by the error Limits.Validate returns, a *LimitError.
var ErrInvalidLimits = errors.New("invalid limits")

// Validate reports the first field out of range, as a *LimitError. cmd/historyd reports the first
// refusal as the usage line of its flag, so the order of the checks is the order of its lines.
func (l Limits) Validate() error {
	d := DefaultLimits()
	positive := func(field string, v, def any) error {
		return &LimitError{Field: field, Value: v, Rule: LimitPositive, Want: def}
	}
	notNegative := func(field string, v time.Duration) error {
		return &LimitError{Field: field, Value: v, Rule: LimitNotNegative, Want: time.Duration(0)}
	}
	notNegativeDefault := func(field string, v int) error {
		return &LimitError{Field: field, Value: v, Rule: LimitNotNegativeDefault, Want: 0}
	}
	switch {
	case l.MaxRecvMsgSize > 0 && l.MaxInflightBytes < int64(l.MaxRecvMsgSize):
		return &LimitError{Field: "MaxInflightBytes", Value: l.MaxInflightBytes, Rule: LimitBelowOther,
			Other: "MaxRecvMsgSize", OtherValue: l.MaxRecvMsgSize}
	case l.StreamWorkers > MaxStreamWorkers:
		return &LimitError{Field: "StreamWorkers", Value: l.StreamWorkers, Rule: LimitAtMost, Want: uint32(MaxStreamWorkers)}
	case l.MaxAppendWindow > MaxMaxAppendWindow:
		return &LimitError{Field: "MaxAppendWindow", Value: l.MaxAppendWindow, Rule: LimitAtMost, Want: MaxMaxAppendWindow}
	case l.KeepaliveMinTime <= 0:
		return positive("KeepaliveMinTime", l.KeepaliveMinTime, d.KeepaliveMinTime)
	case l.KeepaliveTime <= 0:
		return positive("KeepaliveTime", l.KeepaliveTime, d.KeepaliveTime)
	case l.KeepaliveTimeout <= 0:
		return positive("KeepaliveTimeout", l.KeepaliveTimeout, d.KeepaliveTimeout)
	case l.MaxConnectionIdle <= 0:
		return positive("MaxConnectionIdle", l.MaxConnectionIdle, d.MaxConnectionIdle)
	case l.RequestBodyTimeout <= 0:
		return positive("RequestBodyTimeout", l.RequestBodyTimeout, d.RequestBodyTimeout)
	case l.StreamIdleTimeout <= 0:
		return positive("StreamIdleTimeout", l.StreamIdleTimeout, d.StreamIdleTimeout)
	case l.MaxConnectionAge < 0:
		return notNegative("MaxConnectionAge", l.MaxConnectionAge)
	case l.MaxConnectionAgeGrace < 0:
		return notNegative("MaxConnectionAgeGrace", l.MaxConnectionAgeGrace)
	case l.MaxRecvMsgSize <= 0:
		return positive("MaxRecvMsgSize", l.MaxRecvMsgSize, d.MaxRecvMsgSize)
	case l.MaxConcurrentStreams == 0:
		return positive("MaxConcurrentStreams", l.MaxConcurrentStreams, d.MaxConcurrentStreams)
	case l.MaxConnections <= 0:
		return positive("MaxConnections", l.MaxConnections, d.MaxConnections)
	case l.MaxAppendWindow < 0:
		return notNegativeDefault("MaxAppendWindow", l.MaxAppendWindow)
	case l.MaxResponseBytes < 0:
		return notNegativeDefault("MaxResponseBytes", l.MaxResponseBytes)
	case l.MaxRenderedBytes < 0:
		return notNegativeDefault("MaxRenderedBytes", l.MaxRenderedBytes)
	case l.MaxImportBytes < 0:
		return notNegativeDefault("MaxImportBytes", l.MaxImportBytes)
	case orDefault(l.MaxRenderedBytes, d.MaxRenderedBytes) > orDefault(l.MaxResponseBytes, d.MaxResponseBytes):
		return &LimitError{Field: "MaxRenderedBytes", Value: orDefault(l.MaxRenderedBytes, d.MaxRenderedBytes), Rule: LimitAboveOther,
			Other: "MaxResponseBytes", OtherValue: orDefault(l.MaxResponseBytes, d.MaxResponseBytes)}
	}
	return nil
}

// WithLimits sets the transport limits. The default is DefaultLimits(); a Limits that does not
// validate is repaired field by field (a field out of range takes its default, a render cap above
// the response budget falls to the budget), so New never builds a server without limits
// (cmd/historyd validates the configuration and reports errors before this point).
func WithLimits(l Limits) Option {
	return func(o *options) { o.limits = l }
}

// serverOptions returns the grpc.ServerOptions that enforce l.
func (l Limits) serverOptions() []grpc.ServerOption {
	l = l.orDefaults()
	params := keepalive.ServerParameters{
		MaxConnectionIdle: l.MaxConnectionIdle,
		Time:              l.KeepaliveTime,
		Timeout:           l.KeepaliveTimeout,
	}
	if l.MaxConnectionAge > 0 {
		params.MaxConnectionAge = l.MaxConnectionAge
		if l.MaxConnectionAgeGrace > 0 {
			params.MaxConnectionAgeGrace = l.MaxConnectionAgeGrace
		}
	}
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(l.MaxRecvMsgSize),
		grpc.MaxConcurrentStreams(l.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime:             l.KeepaliveMinTime,
			PermitWithoutStream: l.KeepalivePermitWithoutStream,
		}),
		grpc.KeepaliveParams(params),
		grpc.MaxHeaderListSize(maxHeaderListSize),
		grpc.ConnectionTimeout(connectionTimeout),
	}
	if l.StreamWorkers > 0 {
		opts = append(opts, grpc.NumStreamWorkers(l.StreamWorkers))
	}
	return opts
}

// orDefault is v, or def when v is 0 or below (the byte budgets' "0: the default").
func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}

// orDefaults replaces each field out of range with its default, and a render cap above the
// response budget with the budget.
func (l Limits) orDefaults() Limits {
	d := DefaultLimits()
	if l.MaxRecvMsgSize <= 0 {
		l.MaxRecvMsgSize = d.MaxRecvMsgSize
	}
	if l.MaxConcurrentStreams == 0 {
		l.MaxConcurrentStreams = d.MaxConcurrentStreams
	}
	if l.KeepaliveMinTime <= 0 {
		l.KeepaliveMinTime = d.KeepaliveMinTime
	}
	if l.KeepaliveTime <= 0 {
		l.KeepaliveTime = d.KeepaliveTime
	}
	if l.KeepaliveTimeout <= 0 {
		l.KeepaliveTimeout = d.KeepaliveTimeout
	}
	if l.MaxConnectionIdle <= 0 {
		l.MaxConnectionIdle = d.MaxConnectionIdle
	}
	if l.MaxConnections <= 0 {
		l.MaxConnections = d.MaxConnections
	}
	if l.RequestBodyTimeout <= 0 {
		l.RequestBodyTimeout = d.RequestBodyTimeout
	}
	if l.StreamIdleTimeout <= 0 {
		l.StreamIdleTimeout = d.StreamIdleTimeout
	}
	if l.MaxInflightBytes < int64(l.MaxRecvMsgSize) {
		l.MaxInflightBytes = max(d.MaxInflightBytes, int64(l.MaxRecvMsgSize))
	}
	l.MaxResponseBytes = orDefault(l.MaxResponseBytes, d.MaxResponseBytes)
	l.MaxRenderedBytes = orDefault(l.MaxRenderedBytes, d.MaxRenderedBytes)
	l.MaxImportBytes = orDefault(l.MaxImportBytes, d.MaxImportBytes)
	if l.MaxRenderedBytes > l.MaxResponseBytes {
		// A rendering that large could never be sent: the cap falls to what a response can
		// carry (Validate refuses it; WithLimits repairs it).
		l.MaxRenderedBytes = min(d.MaxRenderedBytes, l.MaxResponseBytes)
	}
	if l.StreamWorkers > MaxStreamWorkers {
		l.StreamWorkers = d.StreamWorkers
	}
	if l.MaxAppendWindow <= 0 || l.MaxAppendWindow > MaxMaxAppendWindow {
		l.MaxAppendWindow = d.MaxAppendWindow
	}
	l.MaxConnectionAge = max(l.MaxConnectionAge, 0)
	l.MaxConnectionAgeGrace = max(l.MaxConnectionAgeGrace, 0)
	return l
}
