package exchange_test

import (
	"testing"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/exchange/exchangetest"
)

// TestMemoryConformance runs the exchange conformance suite against the memory engine (issue 17:
// "The exchange conformance suite passes on memory, sqlite and postgres"), with its byte budget
// gate open.
func TestMemoryConformance(t *testing.T) {
	exchangetest.Run(t, memoryFactory, exchangetest.Capabilities{ByteBudget: true})
}

// memoryFactory maps the suite's Options to exchange.Option one for one; NoBound is the memory
// engine's "n <= 0 means no bound".
func memoryFactory(t *testing.T, o exchangetest.Options) exchange.Service {
	var opts []exchange.Option
	bound := func(n int, with func(int) exchange.Option) {
		switch {
		case n == exchangetest.NoBound:
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
	svc := exchange.Memory(opts...)
	t.Cleanup(func() { _ = svc.Close() })
	return svc
}
