package server

import (
	"encoding/base64"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// Page sizes of ExchangeService's lists (documented in exchange_service.proto).
const (
	// exchangeDefaultPageSize is the page size when a request gives 0.
	exchangeDefaultPageSize = 100
	// exchangeMaxPageSize caps page_size (AIP-158: larger values are coerced to the maximum). The
	// bytes of a page are bounded apart from it, by the response budget (--max-response-bytes):
	// a page of large messages comes back shorter (exchange_budget.go).
	exchangeMaxPageSize = 1000
)

// exchangePageSize reads a page_size: 0 is the default, larger than the maximum is the maximum,
// negative is INVALID_ARGUMENT.
func exchangePageSize(field string, n int32) (int, error) {
	switch {
	case n < 0:
		return 0, &FieldError{Field: field, Err: fmt.Errorf("%w: must not be negative, got %d", envelope.ErrInvalid, n)}
	case n == 0:
		return exchangeDefaultPageSize, nil
	}
	return min(int(n), exchangeMaxPageSize), nil
}

// Page tokens are opaque to clients: base64url of "x1.<list>.<n>.<n>.<scope>". The list tag keeps
// a token of one list from being accepted by another, and the scope (a checksum of the owner and
// sender filter the list was read for, scopeKey) one owner's from being accepted for another, or
// for another filter (AIP-158: a page token continues the request that made it): its positions
// index that owner's inboxes or dead letters alone, so another owner's listing would silently skip
// or repeat messages from it. Tokens without the scope, made before it was added, are still
// accepted, so a listing under way keeps going across an upgrade or between replicas of two
// versions.
const exchangeTokenVersion = "x1"

// scopeKey is the scope part of a token: 16 hex digits of FNV-1a over the parts naming the list's
// owner and filter ("" for the owner list, which is the tenant's). It binds, it does not protect:
// tokens are opaque, not secret, and the server reads only the owner's list the request names.
func scopeKey(parts ...string) string {
	h := fnv.New64a()
	for _, p := range parts {
		_, _ = h.Write([]byte(p))
		_, _ = h.Write([]byte{0})
	}
	return strconv.FormatUint(h.Sum64()|1<<63, 16) // always 16 digits
}

// inboxScope is the scope of a Receive listing: the owner and the sender filter, if any.
func inboxScope(owner uuid.UUID, sender *uuid.UUID) string {
	if sender == nil {
		return scopeKey(owner.String(), "*")
	}
	return scopeKey(owner.String(), sender.String())
}

// encodeExchangeToken makes the token that resumes list, read for scope, after the position (a, b).
func encodeExchangeToken(list, scope string, a, b uint64) string {
	raw := exchangeTokenVersion + "." + list + "." + strconv.FormatUint(a, 10) + "." + strconv.FormatUint(b, 10) + "." + scope
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodeExchangeToken reads a token of list made for scope (or one made before tokens had a
// scope); the empty token is the start (0, 0). Anything else is INVALID_ARGUMENT naming field.
func decodeExchangeToken(field, list, scope, token string) (a, b uint64, err error) {
	if token == "" {
		return 0, 0, nil
	}
	bad := &FieldError{Field: field, Err: fmt.Errorf("%w: not a page token of this list", envelope.ErrInvalid)}
	raw, derr := base64.RawURLEncoding.DecodeString(token)
	if derr != nil {
		return 0, 0, bad
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) < 4 || len(parts) > 5 || parts[0] != exchangeTokenVersion || parts[1] != list {
		return 0, 0, bad
	}
	if len(parts) == 5 && parts[4] != scope {
		return 0, 0, &FieldError{Field: field, Err: fmt.Errorf("%w: the page token was made for another owner or sender filter", envelope.ErrInvalid)}
	}
	if a, err = strconv.ParseUint(parts[2], 10, 64); err != nil {
		return 0, 0, bad
	}
	if b, err = strconv.ParseUint(parts[3], 10, 64); err != nil {
		return 0, 0, bad
	}
	return a, b, nil
}

// parseOwnerID reads a required owner UUID (any form Python's uuid.UUID(str) accepts; ADR-0001 D1).
// Empty, malformed or the nil UUID is INVALID_ARGUMENT naming field (issue 6 "Bad input"; issue
// 11 case 8): it is parseID.
func parseOwnerID(field, s string) (uuid.UUID, error) { return parseID(field, s) }

// parseOptionalOwnerID reads an optional owner UUID; nil when absent.
func parseOptionalOwnerID(field string, s *string) (*uuid.UUID, error) {
	if s == nil {
		return nil, nil
	}
	id, err := parseOwnerID(field, *s)
	if err != nil {
		return nil, err
	}
	return &id, nil
}

// parseInboxScope reads the owner_id and optional sender that name the inboxes Receive, Lease and
// SubscribeInbox read: all of the owner's, or the one from sender.
func parseInboxScope(ownerID string, sender *string) (uuid.UUID, *uuid.UUID, error) {
	owner, err := parseOwnerID("owner_id", ownerID)
	if err != nil {
		return uuid.Nil, nil, err
	}
	from, err := parseOptionalOwnerID("sender", sender)
	if err != nil {
		return uuid.Nil, nil, err
	}
	return owner, from, nil
}

// ownersScope is the scope of the owner list, which is the tenant's.
var ownersScope = scopeKey()
