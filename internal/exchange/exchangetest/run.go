package exchangetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/exchange"
)

// NoBound asks for no bound where an option allows none (MaxOutbox, MaxInbox, MaxSubscriptions);
// the memory engine maps it to exchange's "n <= 0 means no bound".
const NoBound = -1

// Options are the knobs the cases turn; a zero field means the engine's default (the exchange
// package's Default* constants).
type Options struct {
	// MaxOutbox bounds one owner's outbox (exchange.WithMaxOutbox); NoBound for none.
	MaxOutbox int
	// MaxInbox bounds one inbox (exchange.WithMaxInbox); NoBound for none.
	MaxInbox int
	// MaxDeadLetters bounds one owner's dead letters (exchange.WithMaxDeadLetters); always >= 1
	// when set.
	MaxDeadLetters int
	// SubscriberBuffer is a subscription's buffer (exchange.WithSubscriberBuffer), and
	// SubscriberBufferBytes its bound in bytes (exchange.WithSubscriberBufferBytes).
	SubscriberBuffer      int
	SubscriberBufferBytes int64
	// MaxSubscriptions bounds the live subscriptions (exchange.WithMaxSubscriptions); NoBound for
	// none.
	MaxSubscriptions int
	// RequestTTL and RequestCount are the request memory per sender (exchange.WithRequestMemory);
	// both are set together or not at all.
	RequestTTL   time.Duration
	RequestCount int
	// Clock stamps dead letters and ages request ids (exchange.WithClock); nil is the wall clock.
	Clock func() time.Time
	// Background turns the background collector on (exchange.WithBackgroundCollection).
	Background bool
}

// Factory returns a new, empty Service for one test, built with opts, and arranges for it to be
// closed when the test ends (the suite may close it earlier; Close is idempotent).
type Factory func(t *testing.T, opts Options) exchange.Service

// Capabilities say which gated cases an engine runs, and how large the load cases are; every other
// case runs on every engine.
type Capabilities struct {
	// ByteBudget: the engine bounds the bytes of mail it holds (exchange.WithByteBudget, memory
	// only). Issue 17's decisions: "The byte budget is the memory engine's only; the database
	// engines are bounded by the per-owner bounds ... and the database's own size limit". The gated
	// parts are Stats' Bytes and ByteBudget figures (memory accounting, meaningless for a table);
	// the budget's own refusals are tested in package exchange (budget_test.go).
	ByteBudget bool
	// Scale multiplies the size of the Concurrency and Conservation cases (0 means 1: a few
	// thousand operations, seconds under -race); an engine may raise it in a pass without -race.
	Scale int
	// Elsewhere names cases this run leaves to another run of the same target, with where (the
	// reason is printed).
	Elsewhere map[string]string
}

type testCase struct {
	name string
	fn   func(t *testing.T, f Factory, caps Capabilities)
}

// cases is the suite, in the order it runs.
func cases() []testCase {
	return []testCase{
		{"Vectors", testVectors},
		{"RegisterErrors", testRegisterErrors},
		{"SendBuildsBaseMessage", testSendBuildsBaseMessage},
		{"SendErrors", testSendErrors},
		{"CollectReportAndDeadLetters", testCollectReportAndDeadLetters},
		{"CollectRecipientLeft", testCollectRecipientLeft},
		{"BroadcastAlone", testBroadcastAlone},
		{"BroadcastSnapshot", testBroadcastSnapshot},
		{"CollectUnregistered", testCollectUnregistered},
		{"CollectReportOptions", testCollectReportOptions},
		{"OutboxBound", testOutboxBound},
		{"InboxBound", testInboxBound},
		{"DeadLettersBounded", testDeadLettersBounded},
		{"DeadLettersAlwaysBounded", testDeadLettersAlwaysBounded},
		{"ReceiveOrderAndPages", testReceiveOrderAndPages},
		{"Pop", testPop},
		{"PopIfCheckErrorLeavesTheMessage", testPopIfCheckError},
		{"ReclaimInboxesOfDepartedSenders", testReclaimInboxes},
		{"ReturningSenderInboxMovesToTheEnd", testReturningSenderInbox},
		{"ReceiveCursorSurvivesReclaim", testReceiveCursorSurvivesReclaim},
		{"UnregisterReturnsWhatTheOwnerHeld", testUnregisterReturnsHeld},
		{"UnregisterIfRemovesNothingWhenRefused", testUnregisterIfRefused},
		{"OwnersPages", testOwnersPages},
		{"Get", testGet},
		{"SendRequestID", testSendRequestID},
		{"SendRequestIDBeforeRegistration", testSendRequestIDBeforeRegistration},
		{"RememberedBeforeValidation", testRememberedBeforeValidation},
		{"SendRefusesNUL", testSendRefusesNUL},
		{"SubscribeLive", testSubscribeLive},
		{"SubscribeEvictsSlowSubscriber", testSubscribeEvictsSlow},
		{"SubscribeEvictsSlowSubscriberBytes", testSubscribeEvictsSlowBytes},
		{"SubscribeEndsOnUnregister", testSubscribeEndsOnUnregister},
		{"Unsubscribe", testUnsubscribe},
		{"SubscribeLimit", testSubscribeLimit},
		{"CloseShutsTheExchange", testClose},
		{"CollectAll", testCollectAll},
		{"CollectAllCanceled", testCollectAllCanceled},
		{"BackgroundCollection", testBackgroundCollection},
		{"BackgroundCollectionOffByDefault", testBackgroundOff},
		{"Stats", testStats},
		{"Ledger", testLedger},
		{"LeaseHides", testLeaseHides},
		{"LeasePopSkipsLeased", testLeasePopSkipsLeased},
		{"LeaseAck", testLeaseAck},
		{"LeaseExpiry", testLeaseExpiry},
		{"LeaseNack", testLeaseNack},
		{"LeaseExtend", testLeaseExtend},
		{"LeaseMaxAttempts", testLeaseMaxAttempts},
		{"LeaseScope", testLeaseScope},
		{"LeaseUnregister", testLeaseUnregister},
		{"LeaseUnregisterNoticed", testLeaseUnregisterNoticed},
		{"LeaseInboxBound", testLeaseInboxBound},
		{"LeaseReclaim", testLeaseReclaim},
		{"LeaseRegisterSettings", testLeaseRegisterSettings},
		{"LeaseLedger", testLeaseLedger},
		{"LeaseRelease", testLeaseRelease},
		{"LeaseCompeting", testLeaseCompeting},
		{"Concurrency", testConcurrency},
		{"Conservation", testConservation},
	}
}

// Run runs the whole suite against the engine newService makes, the gated cases as caps allows.
func Run(t *testing.T, newService Factory, caps Capabilities) {
	if caps.Scale < 1 {
		caps.Scale = 1
	}
	for _, tc := range cases() {
		t.Run(tc.name, func(t *testing.T) {
			if where, ok := caps.Elsewhere[tc.name]; ok {
				t.Skip("runs elsewhere: " + where)
			}
			tc.fn(t, newService, caps)
		})
	}
}

// testTimeout bounds every wait, so that a bug fails a case instead of hanging it.
const testTimeout = 10 * time.Second

// Owners used throughout, spelled like the vectors' fixed UUIDs.
var (
	ownerA = uuid.MustParse("aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa")
	ownerB = uuid.MustParse("bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb")
	ownerC = uuid.MustParse("cccccccc-cccc-4ccc-8ccc-cccccccccccc")
	ownerD = uuid.MustParse("dddddddd-dddd-4ddd-8ddd-dddddddddddd")
)

// ctx returns a context bounded so that a bug fails the test instead of hanging it.
func ctx(t testing.TB) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}
