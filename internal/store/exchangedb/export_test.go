package exchangedb

// What plan_test.go and prune_test.go reach inside the package for: the statements whose plans
// are checked, with the values of their arguments, and the pruning chunk.
var (
	ReceivePageQuery = receivePageQuery
	LeaseQuery       = leaseQuery
	QLeaseHidden     = qLeaseHidden
	StInbox          = stInbox
	StPopped         = stPopped
	StAcked          = stAcked
	StReturned       = stReturned
	StEvicted        = stEvicted
)

const (
	Tenant               = tenant
	QPruneSelect         = qPruneSelect
	QPruneRow            = qPruneRow
	QPruneMessage        = qPruneMessage
	QPruneRequestsSelect = qPruneRequestsSelect
	QPruneRequest        = qPruneRequest
	QPopVisible          = qPopVisible
	QDue                 = qDue
	QSweepSelect         = qSweepSelect
)

// SetPruneChunk sets pruneChunk until the returned function restores it.
func SetPruneChunk(n int) (restore func()) {
	old := pruneChunk
	pruneChunk = n
	return func() { pruneChunk = old }
}
