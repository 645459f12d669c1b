package main

import (
	"errors"
	"flag"
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
		{"stream-workers", "HISTORYD_STREAM_WORKERS", strconv.FormatUint(uint64(d.StreamWorkers), 10), "goroutines kept to serve calls, so that a call reuses a grown stack; a call that finds them all busy gets its own goroutine (0 = a new goroutine per call)"},
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
		n, err := strconv.ParseUint(v, 10, 32)
		c.Limits.StreamWorkers = uint32(n)
		return err
	})
	c.Limits.StreamWorkers = uint32(mustInt(s[14].def))
}

// defaultServingConfig is the configuration with every flag of servingConfig at its default.
func defaultServingConfig() servingConfig {
	var c servingConfig
	c.register(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return c
}

// validate checks the values that the flag types do not.
func (c servingConfig) validate() error {
	switch {
	case (c.TLSCert == "") != (c.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together: give both or neither")
	case c.TLSClientCA != "" && c.TLSCert == "":
		return errors.New("--tls-client-ca (mutual TLS) needs --tls-cert and --tls-key")
	}
	if c.MetricsAddr != "" {
		if err := validateAddr("metrics-addr", c.MetricsAddr, "127.0.0.1:9090"); err != nil {
			return err
		}
	}
	return c.Limits.Validate()
}
