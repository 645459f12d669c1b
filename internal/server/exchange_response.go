package server

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
)

// exchangeMaxResponseBytes is the ExchangeService's response budget unless RegisterExchange is
// given the server's (--max-response-bytes): DefaultMaxResponseBytes, the default receive limit of
// gRPC clients. The server's own send limit is grpc-go's default, math.MaxInt32, which historyd
// does not lower, so this is the smaller of the two.
const exchangeMaxResponseBytes = DefaultMaxResponseBytes

// errOwnerHoldsTooMuch is the sentinel of ownerHoldsTooMuchError: FAILED_PRECONDITION with reason
// OWNER_HOLDS_TOO_MUCH (errors.go).
var errOwnerHoldsTooMuch = errors.New("owner holds too much to return in one response")

// ownerHoldsTooMuchError refuses an Unregister whose response would exceed the limit: nothing was
// removed (docs/design.md#exchange: nothing is lost by leaving). Its metadata says how much, so the
// client can drain the owner and retry.
type ownerHoldsTooMuchError struct {
	owner               uuid.UUID
	size, limit         int
	queued, inbox, dead int
}

func (e *ownerHoldsTooMuchError) Error() string {
	return fmt.Sprintf("Owner %s holds too much to return in one response (over %d bytes counted before stopping, at most %d: %d queued, "+
		"%d in inboxes, %d dead letters); nothing was removed: collect its outbox, pop its inboxes, read its "+
		"dead letters with ListDeadLetters and set omit_dead_letters, then retry",
		e.owner, e.size, e.limit, e.queued, e.inbox, e.dead)
}

// Unwrap returns errOwnerHoldsTooMuch, whose rule gives the code and reason.
func (e *ownerHoldsTooMuchError) Unwrap() error { return errOwnerHoldsTooMuch }

// ErrorMetadata names the owner and gives the sizes and counts.
func (e *ownerHoldsTooMuchError) ErrorMetadata() map[string]string {
	return map[string]string{
		"ownerId":          e.owner.String(),
		"responseBytes":    strconv.Itoa(e.size),
		"maxResponseBytes": strconv.Itoa(e.limit),
		"flag":             maxResponseBytesFlag,
		"queuedCount":      strconv.Itoa(e.queued),
		"inboxCount":       strconv.Itoa(e.inbox),
		"deadLetterCount":  strconv.Itoa(e.dead),
	}
}

// unregisterResponse is the check UnregisterIf runs under the owner's locks: it converts what the
// owner holds into the response (into *out) with o, entry by entry against limit, and refuses, so
// that nothing is removed, at the first entry that passes it (never building the whole flow first).
func unregisterResponse(out **historyv1.UnregisterResponse, omitDeadLetters bool, o messageOut, limit int) func(*exchange.Snapshot) error {
	return func(snap *exchange.Snapshot) error {
		returned := snap
		if omitDeadLetters {
			// The dead letters this call made (expired last-attempt leases it noticed) are
			// returned all the same: the client could not have read them (nothing is lost by
			// leaving, docs/decisions/0020-leases.md).
			cp := *snap
			cp.DeadLetters = nil
			for _, dl := range snap.DeadLetters {
				if dl.Seq > snap.NoticedAfter {
					cp.DeadLetters = append(cp.DeadLetters, dl)
				}
			}
			returned = &cp
		}
		// The flow is field 1 of the response: a tag and a length prefix of at most 5 bytes.
		flow, n := flowWithin(returned, true, o, limit-6)
		if flow == nil {
			e := &ownerHoldsTooMuchError{owner: snap.Owner, size: n + 6, limit: limit, queued: len(snap.Outbox), dead: len(snap.DeadLetters)}
			for _, in := range snap.Inboxes {
				e.inbox += len(in.Messages)
			}
			return e
		}
		*out = &historyv1.UnregisterResponse{Flow: flow}
		return nil
	}
}

// reportFixedBytes is what a collect report's top-level counts and flag may take at most (a tag
// and a 10-byte varint each), set aside before its entries are counted against the limit.
const reportFixedBytes = 64

// reportBudget counts a report's entries against the response limit. Once one entry does not fit,
// none does: a truncated report is a prefix of the full one.
type reportBudget struct {
	left      int
	truncated bool
}

// take reserves n bytes; false (and the report is truncated) when they do not fit.
func (b *reportBudget) take(n int) bool {
	if b.truncated || n > b.left {
		b.truncated = true
		return false
	}
	b.left -= n
	return true
}

// entryBytes is the encoded size of a repeated message field's entry of n bytes (field numbers
// below 16 take one tag byte).
func entryBytes(n int) int { return 1 + protowire.SizeVarint(uint64(n)) + n }

// openEntryBytes is the size of an entry of n bytes that will grow (an OwnerCollect whose
// deliveries are added later): its length prefix is counted at the 5 bytes of any length below
// 32 GiB.
func openEntryBytes(n int) int { return 1 + 5 + n }

// collectResponse is Collect's response for rep, within limit bytes (exchange_service.proto).
func collectResponse(rep *exchange.Report, limit int) *historyv1.CollectResponse {
	resp := &historyv1.CollectResponse{
		DeliveredCount: int32(rep.Delivered),
		CollectedCount: int32(len(rep.Deliveries)),
		DropCount:      int32(rep.Drops),
	}
	b := reportBudget{left: limit - reportFixedBytes}
	for _, d := range rep.Deliveries {
		md := deliveryToProto(d)
		if !b.take(entryBytes(proto.Size(md))) {
			break
		}
		resp.Deliveries = append(resp.Deliveries, md)
	}
	resp.ReportTruncated = b.truncated
	return resp
}

// collectAllResponse is CollectAll's response for all, within limit bytes: the owners' entries
// with their counts first, as many as fit, then their deliveries in order, as many as fit.
func collectAllResponse(all *exchange.AllReport, limit int) *historyv1.CollectAllResponse {
	resp := &historyv1.CollectAllResponse{DeliveredCount: int32(all.Delivered)}
	b := reportBudget{left: limit - reportFixedBytes}
	for _, rep := range all.Reports {
		oc := &historyv1.OwnerCollect{
			OwnerId:        rep.Owner.String(),
			DeliveredCount: int32(rep.Delivered),
			CollectedCount: int32(len(rep.Deliveries)),
			DropCount:      int32(rep.Drops),
		}
		if !b.take(openEntryBytes(proto.Size(oc))) {
			break
		}
		resp.Collects = append(resp.Collects, oc)
	}
owners:
	for i, oc := range resp.Collects {
		for _, d := range all.Reports[i].Deliveries {
			md := deliveryToProto(d)
			if !b.take(entryBytes(proto.Size(md))) {
				break owners
			}
			oc.Deliveries = append(oc.Deliveries, md)
		}
	}
	resp.ReportTruncated = b.truncated
	return resp
}
