package main

import (
	"errors"
	"flag"
	"fmt"
	"strconv"

	"github.com/historyd/historyd/internal/server"
)

// servingConfig configures how historyd faces the network (issue 7): authentication, TLS, the
// transport limits and the metrics listener.
type servingConfig struct {
	AuthTokensFile string
	TLSCert        string
	TLSKey         string
	TLSClientCA    string
	MetricsAddr    string
	Limits         server.Limits
}

// servingSettings are the settings of servingConfig; init appends them to settings, so they get
// the environment fallback, the usage lines and the README table like every other setting.
var servingSettings = func() []setting {
	d := server.DefaultLimits()
	return []setting{
		{"auth-tokens-file", "HISTORYD_AUTH_TOKENS_FILE", "", "file of bearer tokens, one a line (# comments); when set, every call but grpc.health.v1 needs `authorization: Bearer <token>`; reread on SIGHUP (empty = no authentication)"},
		{"tls-cert", "HISTORYD_TLS_CERT", "", "PEM certificate chain to serve TLS with; needs --tls-key; reread on SIGHUP (empty = plaintext)"},
		{"tls-key", "HISTORYD_TLS_KEY", "", "PEM private key of --tls-cert"},
		{"tls-client-ca", "HISTORYD_TLS_CLIENT_CA", "", "PEM CA certificates for mutual TLS: clients must present a certificate they issued, valid now; needs --tls-cert; reread on SIGHUP (empty = no client certificates)"},
		{"metrics-addr", "HISTORYD_METRICS_ADDR", "", "host:port to serve Prometheus metrics on, at /metrics, over plain HTTP (empty = off)"},
		{"max-recv-msg-size", "HISTORYD_MAX_RECV_MSG_SIZE", strconv.Itoa(d.MaxRecvMsgSize), "largest request message in bytes; a larger one is RESOURCE_EXHAUSTED"},
		{"max-concurrent-streams", "HISTORYD_MAX_CONCURRENT_STREAMS", strconv.FormatUint(uint64(d.MaxConcurrentStreams), 10), "calls one connection may have open at once (HTTP/2 max concurrent streams)"},
		{"keepalive-min-time", "HISTORYD_KEEPALIVE_MIN_TIME", d.KeepaliveMinTime.String(), "shortest interval between client pings; a client pinging more often is disconnected (GOAWAY too_many_pings)"},
		{"keepalive-permit-without-stream", "HISTORYD_KEEPALIVE_PERMIT_WITHOUT_STREAM", strconv.FormatBool(d.KeepalivePermitWithoutStream), "allow client pings on a connection with no open call (true or false)"},
		{"keepalive-time", "HISTORYD_KEEPALIVE_TIME", d.KeepaliveTime.String(), "the server pings a connection idle this long, to find clients that vanished"},
		{"keepalive-timeout", "HISTORYD_KEEPALIVE_TIMEOUT", d.KeepaliveTimeout.String(), "how long the server waits for the answer to its ping before closing the connection"},
		{"max-connection-idle", "HISTORYD_MAX_CONNECTION_IDLE", d.MaxConnectionIdle.String(), "close a connection that has had no open call this long (clients reconnect on their next call)"},
		{"max-connection-age", "HISTORYD_MAX_CONNECTION_AGE", d.MaxConnectionAge.String(), "close any connection this old with GOAWAY, so clients reconnect (0 = never)"},
		{"max-connection-age-grace", "HISTORYD_MAX_CONNECTION_AGE_GRACE", d.MaxConnectionAgeGrace.String(), "after --max-connection-age, how long open calls may finish before the connection is cut (0 = no limit)"},
		{"stream-workers", "HISTORYD_STREAM_WORKERS", strconv.FormatUint(uint64(d.StreamWorkers), 10), "goroutines kept to serve calls, so that a call reuses a grown stack; a call that finds them all busy gets its own goroutine (0 = a new goroutine per call; at most 1024)"},
		{"max-connections", "HISTORYD_MAX_CONNECTIONS", strconv.Itoa(d.MaxConnections), "client connections open at once; one past it is closed as soon as it is accepted"},
		{"max-inflight-bytes", "HISTORYD_MAX_INFLIGHT_BYTES", (*byteSize)(&d.MaxInflightBytes).String(), "request bytes of the calls in progress: each unary or client-streaming call reserves --max-recv-msg-size when its headers arrive, and one that does not fit is RESOURCE_EXHAUSTED before its body is read (a number with an optional KiB, MiB or GiB suffix; at least --max-recv-msg-size)"},
		{"max-response-bytes", "HISTORYD_MAX_RESPONSE_BYTES", "4MiB", "response budget: the largest unary response and stream frame; pages come back shorter to fit, a response that cannot is RESOURCE_EXHAUSTED (RESPONSE_TOO_LARGE); also bounds WatchBranch frames (FRAME_TOO_LARGE) (a number with an optional KiB, MiB or GiB suffix)"},
		{"max-rendered-bytes", "HISTORYD_MAX_RENDERED_BYTES", "1MiB", "cap on one message's rendered text, checked while rendering: a read returns a message past it with a render error, ToChatMessages fails RESOURCE_EXHAUSTED (RENDER_TOO_LARGE); at most --max-response-bytes"},
		{"max-import-bytes", "HISTORYD_MAX_IMPORT_BYTES", "256MiB", "largest ImportBranchStream payload; past it the call is RESOURCE_EXHAUSTED (IMPORT_TOO_LARGE) and nothing is written"},
		{"append-max-window", "HISTORYD_APPEND_MAX_WINDOW", strconv.Itoa(d.MaxAppendWindow), "most items an AppendMessages stream may have in flight: a client's larger window is lowered to it, and past it the server stops reading the stream until it has answered one (at most 65536)"},
		{"request-body-timeout", "HISTORYD_REQUEST_BODY_TIMEOUT", d.RequestBodyTimeout.String(), "how long a unary or client-streaming call may take from its headers to its first request message, holding --max-recv-msg-size of --max-inflight-bytes; past it the call ends DEADLINE_EXCEEDED (Go duration, > 0)"},
		{"stream-idle-timeout", "HISTORYD_STREAM_IDLE_TIMEOUT", d.StreamIdleTimeout.String(), "how long a client-streaming call (ImportBranchStream; not AppendMessages, whose appenders wait between items) may wait for its client's next message, holding its in-flight reservation; past it the stream ends DEADLINE_EXCEEDED (Go duration, > 0)"},
	}
}()

func init() { settings = append(settings, servingSettings...) }

// register defines the flags of servingConfig on fs with their defaults.
func (c *servingConfig) register(fs *flag.FlagSet) {
	s := servingSettings
	fs.StringVar(&c.AuthTokensFile, s[0].flag, s[0].def, s[0].usage)
	fs.StringVar(&c.TLSCert, s[1].flag, s[1].def, s[1].usage)
	fs.StringVar(&c.TLSKey, s[2].flag, s[2].def, s[2].usage)
	fs.StringVar(&c.TLSClientCA, s[3].flag, s[3].def, s[3].usage)
	fs.StringVar(&c.MetricsAddr, s[4].flag, s[4].def, s[4].usage)
	fs.IntVar(&c.Limits.MaxRecvMsgSize, s[5].flag, mustInt(s[5].def), s[5].usage)
	fs.Func(s[6].flag, s[6].usage, func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32)
		c.Limits.MaxConcurrentStreams = uint32(n)
		return err
	})
	c.Limits.MaxConcurrentStreams = uint32(mustInt(s[6].def))
	fs.DurationVar(&c.Limits.KeepaliveMinTime, s[7].flag, mustDuration(s[7].def), s[7].usage)
	fs.BoolVar(&c.Limits.KeepalivePermitWithoutStream, s[8].flag, s[8].def == "true", s[8].usage)
	fs.DurationVar(&c.Limits.KeepaliveTime, s[9].flag, mustDuration(s[9].def), s[9].usage)
	fs.DurationVar(&c.Limits.KeepaliveTimeout, s[10].flag, mustDuration(s[10].def), s[10].usage)
	fs.DurationVar(&c.Limits.MaxConnectionIdle, s[11].flag, mustDuration(s[11].def), s[11].usage)
	fs.DurationVar(&c.Limits.MaxConnectionAge, s[12].flag, mustDuration(s[12].def), s[12].usage)
	fs.DurationVar(&c.Limits.MaxConnectionAgeGrace, s[13].flag, mustDuration(s[13].def), s[13].usage)
	fs.Func(s[14].flag, s[14].usage, func(v string) error {
		n, err := strconv.ParseUint(v, 10, 32) // Limits.Validate holds it to server.MaxStreamWorkers
		c.Limits.StreamWorkers = uint32(n)
		return err
	})
	c.Limits.StreamWorkers = uint32(mustInt(s[14].def))
	fs.IntVar(&c.Limits.MaxConnections, s[15].flag, mustInt(s[15].def), s[15].usage)
	c.Limits.MaxInflightBytes = int64(mustByteSize(s[16].def))
	fs.Var((*byteSize)(&c.Limits.MaxInflightBytes), s[16].flag, s[16].usage)
	for i, dst := range []*int{&c.Limits.MaxResponseBytes, &c.Limits.MaxRenderedBytes, &c.Limits.MaxImportBytes} {
		st := s[17+i]
		*dst = int(mustByteSize(st.def))
		fs.Func(st.flag, st.usage, func(v string) error {
			var b byteSize
			if err := b.Set(v); err != nil {
				return err
			}
			if b < 1 || int64(b) > 1<<31-1 {
				return fmt.Errorf("%q: want 1 to 2147483647 bytes", v)
			}
			*dst = int(b)
			return nil
		})
	}
	fs.IntVar(&c.Limits.MaxAppendWindow, s[20].flag, mustInt(s[20].def), s[20].usage)
	fs.DurationVar(&c.Limits.RequestBodyTimeout, s[21].flag, mustDuration(s[21].def), s[21].usage)
	fs.DurationVar(&c.Limits.StreamIdleTimeout, s[22].flag, mustDuration(s[22].def), s[22].usage)
}

// defaultServingConfig is the configuration with every flag of servingConfig at its default.
func defaultServingConfig() servingConfig {
	var c servingConfig
	c.register(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return c
}

// flagOfLimit names the flag that sets each field of server.Limits, by the field's Go name (the
// Field of a server.LimitError), so that a refused limit's usage line names what to change.
var flagOfLimit = map[string]string{
	"MaxRecvMsgSize":               "max-recv-msg-size",
	"MaxConcurrentStreams":         "max-concurrent-streams",
	"KeepaliveMinTime":             "keepalive-min-time",
	"KeepalivePermitWithoutStream": "keepalive-permit-without-stream",
	"KeepaliveTime":                "keepalive-time",
	"KeepaliveTimeout":             "keepalive-timeout",
	"MaxConnectionIdle":            "max-connection-idle",
	"MaxConnectionAge":             "max-connection-age",
	"MaxConnectionAgeGrace":        "max-connection-age-grace",
	"StreamWorkers":                "stream-workers",
	"MaxConnections":               "max-connections",
	"MaxInflightBytes":             "max-inflight-bytes",
	"MaxResponseBytes":             "max-response-bytes",
	"MaxRenderedBytes":             "max-rendered-bytes",
	"MaxImportBytes":               "max-import-bytes",
	"MaxAppendWindow":              "append-max-window",
	"RequestBodyTimeout":           "request-body-timeout",
	"StreamIdleTimeout":            "stream-idle-timeout",
}

// limitFlag is how a usage line names the field of server.Limits whose Go name is field: --flag.
func limitFlag(field string) string {
	if f, ok := flagOfLimit[field]; ok {
		return "--" + f
	}
	return field // no flag sets it (TestLimitFlags keeps this from happening)
}

// limitUsage turns the refusal of server.Limits.Validate into historyd's usage error, whose line
// names the flags where Validate names the fields; other errors are returned as they are.
func limitUsage(err error) error {
	var le *server.LimitError
	if !errors.As(err, &le) {
		return err
	}
	flags := []string{flagOfLimit[le.Field]}
	if le.Other != "" {
		flags = append(flags, flagOfLimit[le.Other])
	}
	return usagef(flags, "%s", le.Describe(limitFlag))
}

// validate checks the values that the flag types do not; the limits are server.Limits.Validate's
// to check.
func (c servingConfig) validate() error {
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return usagef([]string{"tls-cert", "tls-key"}, "--tls-cert and --tls-key go together: give both or neither")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return usagef([]string{"tls-client-ca", "tls-cert", "tls-key"}, "--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
	}
	if c.MetricsAddr != "" {
		if err := validateAddr("metrics-addr", c.MetricsAddr, "127.0.0.1:9090"); err != nil {
			return err
		}
	}
	return limitUsage(c.Limits.Validate())
}
