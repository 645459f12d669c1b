package server

import (
	"encoding/base64"
	"fmt"
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

// Page tokens are opaque to clients: base64url of "x1.<list>.<n>.<n>". The list tag keeps a token
// of one list from being accepted by another.
const exchangeTokenVersion = "x1"

// encodeExchangeToken makes the token that resumes list after the position (a, b).
func encodeExchangeToken(list string, a, b uint64) string {
	raw := exchangeTokenVersion + "." + list + "." + strconv.FormatUint(a, 10) + "." + strconv.FormatUint(b, 10)
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodeExchangeToken reads a token of list; the empty token is the start (0, 0). Anything else is
// INVALID_ARGUMENT naming field.
func decodeExchangeToken(field, list, token string) (a, b uint64, err error) {
	if token == "" {
		return 0, 0, nil
	}
	bad := &FieldError{Field: field, Err: fmt.Errorf("%w: not a page token of this list", envelope.ErrInvalid)}
	raw, derr := base64.RawURLEncoding.DecodeString(token)
	if derr != nil {
		return 0, 0, bad
	}
	parts := strings.Split(string(raw), ".")
	if len(parts) != 4 || parts[0] != exchangeTokenVersion || parts[1] != list {
		return 0, 0, bad
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
