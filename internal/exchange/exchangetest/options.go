package exchangetest

import "github.com/historyd/historyd/internal/exchange"

// ExchangeOptions maps o to exchange.Option one for one, the memory engine's options, which the
// database engines take too (exchangedb.New); NoBound is their "n <= 0 means no bound".
func (o Options) ExchangeOptions() []exchange.Option {
	var opts []exchange.Option
	bound := func(n int, with func(int) exchange.Option) {
		switch {
		case n == NoBound:
			opts = append(opts, with(0))
		case n > 0:
			opts = append(opts, with(n))
		}
	}
	bound(o.MaxOutbox, exchange.WithMaxOutbox)
	bound(o.MaxInbox, exchange.WithMaxInbox)
	bound(o.MaxSubscriptions, exchange.WithMaxSubscriptions)
	if o.MaxDeadLetters > 0 {
		opts = append(opts, exchange.WithMaxDeadLetters(o.MaxDeadLetters))
	}
	if o.SubscriberBuffer > 0 {
		opts = append(opts, exchange.WithSubscriberBuffer(o.SubscriberBuffer))
	}
	if o.SubscriberBufferBytes > 0 {
		opts = append(opts, exchange.WithSubscriberBufferBytes(o.SubscriberBufferBytes))
	}
	if o.RequestTTL > 0 || o.RequestCount > 0 {
		ttl, n := o.RequestTTL, o.RequestCount
		if ttl <= 0 {
			ttl = exchange.DefaultRequestTTL
		}
		if n <= 0 {
			n = exchange.DefaultRequestsPerSender
		}
		opts = append(opts, exchange.WithRequestMemory(ttl, n))
	}
	if o.Clock != nil {
		opts = append(opts, exchange.WithClock(o.Clock))
	}
	if o.Background {
		opts = append(opts, exchange.WithBackgroundCollection(true))
	}
	return opts
}
