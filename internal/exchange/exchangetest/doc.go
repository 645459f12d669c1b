// Package exchangetest is the conformance suite every exchange.Service engine must pass (issue 17:
// "an interface with a conformance suite of its own that every engine passes, as storetest does for
// the Store"): ADR-0006 D5 as docs/design.md#exchange decides it, the LionAGI vectors, the bounds,
// request ids, subscriptions, concurrency and the conservation run, all through the Service
// interface only.
//
// Run(t, factory, caps) runs every case as a subtest; Capabilities gates the few that only the
// memory engine can hold (its byte budget). Where the database engines may legitimately answer
// differently (a message read back is a new value, not the pointer Send returned; Remembered may
// return the full first message where memory rebuilds it), the cases compare what both must agree
// on: ids, senders, recipients, content, order and counts.
//
// Import rule: exchangetest imports internal/exchange, internal/envelope and internal/vectors only
// among historyd's packages; never internal/store or a particular engine.
package exchangetest
