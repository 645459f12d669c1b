package main

import (
	"errors"
	"flag"
	"strconv"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/server"
)

// exchangeConfig configures the Exchange and its SubscribeInbox streams (issue 6).
type exchangeConfig struct {
	MaxOutbox         int
	MaxInbox          int
	MaxDeadLetters    int
	SubscriberBuffer  int
	BackgroundCollect bool
	Heartbeat         time.Duration
	SendTimeout       time.Duration
	MaxBytes          int64
	MaxStreams        int
	// MaxAttempts and VisibilityTimeout are the lease settings of an owner registered without its
	// own (issue 18).
	MaxAttempts       int
	VisibilityTimeout time.Duration
	// SubscriberBufferBytes bounds a SubscribeInbox stream's buffer in bytes beside
	// SubscriberBuffer's count (the hostile review: 256 messages of 4 MiB for a stream that never
	// reads).
	SubscriberBufferBytes byteSize
}

// exchangeSettings are the Exchange's settings; init appends them to settings, so they get the
// environment fallback, the usage lines and the README table like every other setting.
var exchangeSettings = []setting{
	{"exchange-max-outbox", "HISTORYD_EXCHANGE_MAX_OUTBOX", strconv.Itoa(exchange.DefaultMaxOutbox), "messages one owner may have queued for collection; Send past it is RESOURCE_EXHAUSTED (0 = no bound)"},
	{"exchange-max-inbox", "HISTORYD_EXCHANGE_MAX_INBOX", strconv.Itoa(exchange.DefaultMaxInbox), "messages one inbox (one sender's, at one owner) may hold; deliveries past it become dead letters with reason inbox full (0 = no bound)"},
	{"exchange-max-dead-letters", "HISTORYD_EXCHANGE_MAX_DEAD_LETTERS", strconv.Itoa(exchange.DefaultMaxDeadLetters), "dead letters kept per owner; the oldest are evicted and counted (>= 1: the list is always bounded)"},
	{"exchange-subscriber-buffer", "HISTORYD_EXCHANGE_SUBSCRIBER_BUFFER", strconv.Itoa(exchange.DefaultSubscriberBuffer), "messages a SubscribeInbox stream may have pending before it is ended as too slow (1 to 65536)"},
	{"exchange-background-collect", "HISTORYD_EXCHANGE_BACKGROUND_COLLECT", "false", "collect outboxes in the background after each Send, as LionAGI's Exchange.run (true or false)"},
	{"exchange-heartbeat", "HISTORYD_EXCHANGE_HEARTBEAT", server.DefaultHeartbeat.String(), "idle interval between SubscribeInbox heartbeats, jittered by 10% (Go duration; 0 = none after the first)"},
	{"exchange-send-timeout", "HISTORYD_EXCHANGE_SEND_TIMEOUT", server.DefaultSendTimeout.String(), "how long a SubscribeInbox stream may wait for its client to accept a frame before it is ended as too slow (Go duration, > 0)"},
	{"exchange-max-bytes", "HISTORYD_EXCHANGE_MAX_BYTES", strconv.Itoa(exchange.DefaultByteBudget), "bytes of mail the memory engine's Exchange may hold (outboxes, inboxes, dead letters, Send's remembered request ids; estimated heap; --store sqlite and postgres keep the Exchange in the database, bounded by the per-owner bounds and the database's size); Send past it is RESOURCE_EXHAUSTED (EXCHANGE_BUDGET_EXCEEDED) and nothing is dropped (0 = no bound)"},
	{"inbox-max-streams", "HISTORYD_INBOX_MAX_STREAMS", strconv.Itoa(exchange.DefaultMaxSubscriptions), "SubscribeInbox streams open at once; past it SubscribeInbox is RESOURCE_EXHAUSTED (TOO_MANY_STREAMS) (0 = no limit)"},
	{"exchange-max-attempts", "HISTORYD_EXCHANGE_MAX_ATTEMPTS", strconv.Itoa(exchange.DefaultMaxAttempts), "leases a message may have without an Ack before it becomes a dead letter with reason max attempts, for owners that set none at Register (1 to 1000)"},
	{"exchange-visibility-timeout", "HISTORYD_EXCHANGE_VISIBILITY_TIMEOUT", exchange.DefaultVisibility.String(), "how long a lease hides its message unless acknowledged, for owners and Lease calls that set none (Go duration, 1ms to 12h)"},
	{"exchange-subscriber-buffer-bytes", "HISTORYD_EXCHANGE_SUBSCRIBER_BUFFER_BYTES", sizeString(exchange.DefaultSubscriberBufferBytes), "bytes of messages (estimated heap) a SubscribeInbox stream may have pending before it is ended as too slow; a larger message is still taken when none is pending (a number with an optional KiB, MiB or GiB suffix, > 0)"},
}

func init() { settings = append(settings, exchangeSettings...) }

// register defines the Exchange's flags on fs with their defaults.
func (c *exchangeConfig) register(fs *flag.FlagSet) {
	s := exchangeSettings
	fs.IntVar(&c.MaxOutbox, s[0].flag, mustInt(s[0].def), s[0].usage)
	fs.IntVar(&c.MaxInbox, s[1].flag, mustInt(s[1].def), s[1].usage)
	fs.IntVar(&c.MaxDeadLetters, s[2].flag, mustInt(s[2].def), s[2].usage)
	fs.IntVar(&c.SubscriberBuffer, s[3].flag, mustInt(s[3].def), s[3].usage)
	fs.BoolVar(&c.BackgroundCollect, s[4].flag, s[4].def == "true", s[4].usage)
	fs.DurationVar(&c.Heartbeat, s[5].flag, mustDuration(s[5].def), s[5].usage)
	fs.DurationVar(&c.SendTimeout, s[6].flag, mustDuration(s[6].def), s[6].usage)
	fs.Int64Var(&c.MaxBytes, s[7].flag, int64(mustInt(s[7].def)), s[7].usage)
	fs.IntVar(&c.MaxStreams, s[8].flag, mustInt(s[8].def), s[8].usage)
	fs.IntVar(&c.MaxAttempts, s[9].flag, mustInt(s[9].def), s[9].usage)
	fs.DurationVar(&c.VisibilityTimeout, s[10].flag, mustDuration(s[10].def), s[10].usage)
	c.SubscriberBufferBytes = mustByteSize(s[11].def)
	fs.Var(&c.SubscriberBufferBytes, s[11].flag, s[11].usage)
}

// defaultExchangeConfig is the configuration with every Exchange flag at its default.
func defaultExchangeConfig() exchangeConfig {
	var c exchangeConfig
	c.register(flag.NewFlagSet("defaults", flag.ContinueOnError))
	return c
}

// validate checks the values that the flag types do not.
func (c exchangeConfig) validate() error {
	for _, v := range []struct {
		name string
		n    int
	}{{"exchange-max-outbox", c.MaxOutbox}, {"exchange-max-inbox", c.MaxInbox}, {"exchange-max-bytes", int(c.MaxBytes)},
		{"inbox-max-streams", c.MaxStreams}} {
		if v.n < 0 {
			return badValue(v.name, "%d: must not be negative (0: no bound)", v.n)
		}
	}
	// docs/design.md#exchange: the dead-letter list is bounded per owner, so there is no "no bound".
	if c.MaxDeadLetters < 1 {
		return badValue("exchange-max-dead-letters", "%d: must be at least 1", c.MaxDeadLetters)
	}
	if c.SubscriberBuffer < 1 {
		return badValue("exchange-subscriber-buffer", "%d: must be at least 1", c.SubscriberBuffer)
	}
	if err := checkMaximum("exchange-subscriber-buffer", int64(c.SubscriberBuffer)); err != nil {
		return err
	}
	if c.SubscriberBufferBytes <= 0 {
		return badValue("exchange-subscriber-buffer-bytes", "%d: must be positive, such as 2MiB", c.SubscriberBufferBytes)
	}
	if c.Heartbeat < 0 {
		return badValue("exchange-heartbeat", "%v: must not be negative (0s: none)", c.Heartbeat)
	}
	if c.SendTimeout <= 0 {
		return badValue("exchange-send-timeout", "%v: must be positive, such as 10s", c.SendTimeout)
	}
	if c.MaxAttempts < 1 || c.MaxAttempts > exchange.MaxMaxAttempts {
		return badValue("exchange-max-attempts", "%d: want 1 to %d", c.MaxAttempts, exchange.MaxMaxAttempts)
	}
	if c.VisibilityTimeout < exchange.MinVisibility || c.VisibilityTimeout > exchange.MaxVisibility {
		return badValue("exchange-visibility-timeout", "%v: want %v to %v", c.VisibilityTimeout, exchange.MinVisibility, exchange.MaxVisibility)
	}
	return nil
}

// options are the Exchange's options; a panic the background collector recovers from is logged, and
// so is an owner's failing background collect (a warning, at most once a minute per owner: the
// collector retries it with backoff).
func (c exchangeConfig) options(logger *zap.Logger) []exchange.Option {
	return []exchange.Option{
		exchange.WithMaxOutbox(c.MaxOutbox),
		exchange.WithMaxInbox(c.MaxInbox),
		exchange.WithMaxDeadLetters(c.MaxDeadLetters),
		exchange.WithSubscriberBuffer(c.SubscriberBuffer),
		exchange.WithSubscriberBufferBytes(int64(c.SubscriberBufferBytes)),
		exchange.WithBackgroundCollection(c.BackgroundCollect),
		exchange.WithByteBudget(c.MaxBytes),
		exchange.WithMaxSubscriptions(c.MaxStreams),
		exchange.WithLeaseDefaults(c.MaxAttempts, c.VisibilityTimeout),
		exchange.WithPanicHandler(func(p any) {
			logger.Error("panic in background collection", zap.Any("panic", p), zap.Stack("stack"))
		}),
		exchange.WithCollectFailureHandler(func(owner uuid.UUID, err error) {
			fields := []zap.Field{zap.String("owner_id", owner.String()), zap.Error(err),
				zap.Duration("reported_every", exchange.CollectFailureReportEvery)}
			// A storage error's text is what a client may read; the cause is for this log.
			if ce, ok := errors.AsType[interface {
				error
				LogCause() error
			}](err); ok && ce.LogCause() != nil {
				fields = append(fields, zap.NamedError("cause", ce.LogCause()))
			}
			logger.Warn("background collect failed; retrying", fields...)
		}),
	}
}

// streamOptions configure SubscribeInbox over the --store engine (leaseRecheck).
func (c exchangeConfig) streamOptions(store string) []server.StreamOption {
	return []server.StreamOption{server.WithHeartbeat(c.Heartbeat), server.WithSendTimeout(c.SendTimeout),
		server.WithLeaseRecheck(leaseRecheck(store))}
}

// leaseRecheck is how often a leasing SubscribeInbox held at its max_in_flight leases again on its
// own: only with --store postgres, where an Ack on another replica frees room this one does not
// hear of. The memory and sqlite engines serve one process, through which every Ack goes (and
// wakes its streams): a recheck would only cost them a write transaction four times a second per
// stream (issue 18 review S3).
func leaseRecheck(store string) time.Duration {
	if store == storePostgres {
		return server.DefaultLeaseRecheck
	}
	return 0
}

func mustInt(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic("historyd: bad built-in integer " + s) // a programming error in settings, never input
	}
	return n
}
