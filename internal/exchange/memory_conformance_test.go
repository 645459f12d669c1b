package exchange_test

import (
	"testing"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/exchange/exchangetest"
)

// TestMemoryConformance runs the exchange conformance suite against the memory engine (issue 17:
// "The exchange conformance suite passes on memory, sqlite and postgres"), with its byte budget
// gate open, and the load cases at 10 times their size (a few thousand messages, seconds under
// -race), which the memory engine affords.
func TestMemoryConformance(t *testing.T) {
	exchangetest.Run(t, memoryFactory, exchangetest.Capabilities{ByteBudget: true, Scale: 10})
}

// memoryFactory builds the memory engine with the suite's Options, mapped one for one.
func memoryFactory(t *testing.T, o exchangetest.Options) exchange.Service {
	svc := exchange.Memory(o.ExchangeOptions()...)
	t.Cleanup(func() { _ = svc.Close() })
	return svc
}
