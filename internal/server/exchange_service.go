package server

import (
	"context"
	"errors"
	"fmt"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"sync"
	"time"

	"github.com/google/uuid"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/exchange"
)

// ExchangeServer serves historyd.v1.ExchangeService over an exchange.Service, whichever engine keeps the mail (ADR-0006 D5). The
// handlers are thin: validate and convert the request, call the Exchange, convert the result; the
// status interceptor maps domain errors (errors.go).
type ExchangeServer struct {
	historyv1.UnsafeExchangeServiceServer

	ex      exchange.Service
	streams streamConfig
	// now is the clock Receive's lease states and the leasing streams' timers are read at:
	// WithClock's, which should be the engine's (time.Now for both unless a test sets them).
	now func() time.Time
	// maxResponse bounds the responses the owners' data sizes: exchangeMaxResponseBytes; tests
	// lower it to reach the limit with a few messages.
	maxResponse int
	// maxRendered caps one message's rendered text in the Exchange's reads (--max-rendered-bytes);
	// 0 is DefaultMaxRenderedBytes.
	maxRendered int

	// hub wakes the leasing SubscribeInbox streams of an owner after an Ack or Nack through this
	// server (exchange_lease_hub.go).
	hub leaseHub

	stopping chan struct{} // closed by EndStreams
	stopOnce sync.Once

	// streamEnded, when set, is called with the error each SubscribeInbox handler returns; tests
	// use it to know that a stream has ended on the server side.
	streamEnded func(error)
}

var _ historyv1.ExchangeServiceServer = (*ExchangeServer)(nil)

// NewExchangeServer returns the ExchangeService handlers over ex; opts configure SubscribeInbox.
func NewExchangeServer(ex exchange.Service, opts ...StreamOption) *ExchangeServer {
	c := newStreamConfig(opts)
	return &ExchangeServer{ex: ex, streams: c, now: c.now, maxResponse: exchangeMaxResponseBytes,
		stopping: make(chan struct{})}
}

// RegisterExchange registers the ExchangeService handlers over ex on s and ends their streams when
// s shuts down. Call it before s.Serve.
func RegisterExchange(s *Server, ex exchange.Service, opts ...StreamOption) *ExchangeServer {
	es := NewExchangeServer(ex, opts...)
	es.maxResponse = s.limits.MaxResponseBytes
	es.maxRendered = s.limits.MaxRenderedBytes
	historyv1.RegisterExchangeServiceServer(s.GRPCServer(), es)
	s.OnShutdown(es.EndStreams)
	// issue 19: the service has its own health status, SERVING from now until Shutdown sets every
	// status to NOT_SERVING with the whole server's; when the Exchange lives in the store's
	// database, the caller's FollowStorage makes it follow that database's health as well.
	s.Health().SetServingStatus(historyv1.ExchangeService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	return es
}

// EndStreams ends every SubscribeInbox stream, open or opened later, with UNAVAILABLE (reason
// SERVER_SHUTTING_DOWN). It is the OnShutdown hook RegisterExchange installs; safe to call more than
// once.
func (s *ExchangeServer) EndStreams() { s.stopOnce.Do(func() { close(s.stopping) }) }

// Register creates an owner's flow (ADR-0006 D5: register) with its lease settings (issue 18:
// max_attempts and visibility_timeout; zero means the server's --exchange-max-attempts and
// --exchange-visibility-timeout).
func (s *ExchangeServer) Register(ctx context.Context, req *historyv1.RegisterRequest) (*historyv1.RegisterResponse, error) {
	owner, err := parseOwnerID("owner_id", req.GetOwnerId())
	if err != nil {
		return nil, err
	}
	settings, err := ownerSettingsFromProto(req)
	if err != nil {
		return nil, err
	}
	snap, err := s.ex.Register(ctx, owner, settings)
	if err != nil {
		return nil, err
	}
	return &historyv1.RegisterResponse{Flow: flowToProto(snap, true, s.messageOut(false))}, nil
}

// Unregister removes an owner and returns what it held; no flow for an unknown owner (ADR-0006 D5).
// The owner is removed only if that response fits in s.maxResponse: the size is checked under the
// owner's locks, before the removal, so an owner that holds too much stays registered with all it
// held (FAILED_PRECONDITION, OWNER_HOLDS_TOO_MUCH) instead of being lost with a response the client
// cannot read.
func (s *ExchangeServer) Unregister(ctx context.Context, req *historyv1.UnregisterRequest) (*historyv1.UnregisterResponse, error) {
	owner, err := parseOwnerID("owner_id", req.GetOwnerId())
	if err != nil {
		return nil, err
	}
	var resp *historyv1.UnregisterResponse
	_, ok, err := s.ex.UnregisterIf(ctx, owner, unregisterResponse(&resp, req.GetOmitDeadLetters(), s.messageOut(req.GetOmitRendered()), s.maxResponse))
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return &historyv1.UnregisterResponse{}, nil
	}
	return resp, nil
}

// ListOwners lists registered owners in registration order.
func (s *ExchangeServer) ListOwners(ctx context.Context, req *historyv1.ListOwnersRequest) (*historyv1.ListOwnersResponse, error) {
	size, err := exchangePageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	after, _, err := decodeExchangeToken("page_token", "owners", ownersScope, req.GetPageToken())
	if err != nil {
		return nil, err
	}
	page, err := s.ex.Owners(ctx, after, size)
	if err != nil {
		return nil, err
	}
	resp := &historyv1.ListOwnersResponse{}
	var overflow int
	resp.Owners, overflow = fitPage(page.Owners, ownerToProto, s.maxResponse)
	switch {
	case overflow > 0 && len(resp.Owners) == 0:
		return nil, &exchangeResponseTooLargeError{size: overflow, limit: s.maxResponse, what: "ListOwners's first owner"}
	case overflow > 0:
		// Shorter than asked, within the response budget: resume after the last owner returned.
		resp.NextPageToken = encodeExchangeToken("owners", ownersScope, page.Owners[len(resp.Owners)-1].Seq, 0)
	case page.More:
		// The last owner the page visited, listed or (unregistered meanwhile) not: a token whenever
		// owners follow, so an owner leaving never ends the listing early.
		resp.NextPageToken = encodeExchangeToken("owners", ownersScope, page.Next, 0)
	}
	return resp, nil
}

// Send queues a base Message in the sender's outbox (ADR-0006 D5: send), idempotent with a
// request_id: the repeat check comes right after the sender is read, before any other check
// (docs/design.md#branches, the idempotency rule).
func (s *ExchangeServer) Send(ctx context.Context, req *historyv1.SendRequest) (*historyv1.SendResponse, error) {
	sender, err := parseOwnerID("sender", req.GetSender())
	if err != nil {
		return nil, err
	}
	// Read the rest of the request before the repeat check, without failing yet: a repeat is
	// answered whatever the rest says, and from it when it builds the first message exactly
	// (exchange.Exchange.Remembered).
	sr, readErr := sendRequestFromProto(sender, req)
	if err := exchange.CheckRequestID(req.GetRequestId()); err != nil {
		// Before the repeat check: no Send was ever remembered under such an id.
		return nil, &FieldError{Field: "request_id", Err: fmt.Errorf("%w: %v", envelope.ErrInvalid, err)}
	}
	m, ok, err := s.ex.Remembered(ctx, sender, req.GetRequestId(), &sr)
	switch {
	case err != nil:
		return nil, err
	case ok:
		return s.sendResponse(m), nil
	}
	if readErr != nil {
		return nil, readErr
	}
	if n := proto.Size(req) + sendResponseOverhead; n > s.maxResponse {
		// Refused before anything is queued: a message the response cannot carry would be queued
		// with an acknowledgement the client never reads, and retried.
		return nil, &exchangeResponseTooLargeError{size: n, limit: s.maxResponse, what: "Send's response"}
	}
	m, err = s.ex.Send(ctx, sr)
	switch {
	case errors.Is(err, exchange.ErrInvalidRequestID):
		return nil, &FieldError{Field: "request_id", Err: fmt.Errorf("%w: %v", envelope.ErrInvalid, err)}
	case errors.As(err, new(fieldError)):
		return nil, err // it names its field (recipient, channel)
	case errors.Is(err, envelope.ErrInvalid):
		return nil, &FieldError{Field: "content_json", Err: err} // the envelope rejected the content
	case errors.Is(err, exchange.ErrBudgetExceeded):
		return nil, &flagError{err: err, flag: exchangeMaxBytesFlag}
	case errors.Is(err, exchange.ErrOutboxFull):
		return nil, &flagError{err: err, flag: exchangeMaxOutboxFlag}
	case err != nil:
		return nil, err
	}
	return s.sendResponse(m), nil
}

// sendResponseOverhead is what Send's response adds to the request's content: the message's id,
// created_at, role, metadata (lion_class) and participants, with their tags.
const sendResponseOverhead = 1 << 10

// sendResponse is Send's response: the queued message, rendered unless the rendering would take
// the response past the response budget (issue 11: a message over half the budget is still
// acknowledged within a default client's receive limit).
func (s *ExchangeServer) sendResponse(m *envelope.Message) *historyv1.SendResponse {
	resp := &historyv1.SendResponse{Message: s.messageOut(false).message(m)}
	if proto.Size(resp) > s.maxResponse {
		resp.Message.Rendered = nil
	}
	return resp
}

// sendRequestFromProto reads a Send request: as much as is valid, and the first field error.
func sendRequestFromProto(sender uuid.UUID, req *historyv1.SendRequest) (exchange.SendRequest, error) {
	sr := exchange.SendRequest{Sender: sender, Channel: req.Channel, RequestID: req.GetRequestId()}
	var err error
	if sr.Recipient, err = recipientFromProto(req.GetRecipient()); err != nil {
		return sr, &FieldError{Field: "recipient", Err: err}
	}
	if req.ContentJson != nil {
		if sr.Content, err = jsonv.ParseString(req.GetContentJson()); err != nil {
			return sr, &FieldError{Field: "content_json", Err: fmt.Errorf("%w: not JSON: %v", envelope.ErrInvalid, err)}
		}
	}
	return sr, nil
}

// recipientFromProto reads a recipient Value: absent is UNSET, null is None (broadcast), a string is
// normalised (docs/design.md#participants; ADR-0006 D1).
func recipientFromProto(v *structpb.Value) (envelope.Participant, error) {
	if v == nil {
		return envelope.Unset(), nil
	}
	j, err := participantFromProto(v)
	if err != nil {
		return envelope.Participant{}, err
	}
	if j.IsNull() {
		return envelope.None(), nil
	}
	str, _ := j.Str()
	return envelope.ParseParticipant(str), nil
}

// Collect routes an owner's outbox and reports what happened to each message (ADR-0006 D5): counts
// and drops, the reached owners' ids on request, within s.maxResponse (report_truncated past it),
// so that the report of a collect that has happened is never lost to a response too large to read.
func (s *ExchangeServer) Collect(ctx context.Context, req *historyv1.CollectRequest) (*historyv1.CollectResponse, error) {
	owner, err := parseOwnerID("owner_id", req.GetOwnerId())
	if err != nil {
		return nil, err
	}
	rep, err := s.ex.Collect(ctx, owner, exchange.ReportOptions{OwnerIDs: req.GetIncludeReachedOwnerIds()})
	if err != nil {
		return nil, err
	}
	return collectResponse(rep, s.maxResponse), nil
}

// CollectAll collects every registered owner in registration order (ADR-0006 D5: collect_all). It
// stops before the next owner once the call's context is done (the client gave up or its deadline
// passed), leaving the rest queued. Its report is shaped and bounded as Collect's.
func (s *ExchangeServer) CollectAll(ctx context.Context, req *historyv1.CollectAllRequest) (*historyv1.CollectAllResponse, error) {
	all, err := s.ex.CollectAll(ctx, exchange.ReportOptions{OwnerIDs: req.GetIncludeReachedOwnerIds()})
	if err != nil {
		return nil, err
	}
	return collectAllResponse(all, s.maxResponse), nil
}

// Receive returns one page of an owner's inboxes without removing anything (ADR-0006 D5: receive).
func (s *ExchangeServer) Receive(ctx context.Context, req *historyv1.ReceiveRequest) (*historyv1.ReceiveResponse, error) {
	owner, sender, err := parseInboxScope(req.GetOwnerId(), req.Sender)
	if err != nil {
		return nil, err
	}
	size, err := exchangePageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	inbox, seq, err := decodeExchangeToken("page_token", "inbox", inboxScope(owner, sender), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	page, err := s.ex.ReceivePage(ctx, owner, sender, exchange.Cursor{Inbox: inbox, Seq: seq}, size)
	if err != nil {
		return nil, err
	}
	omit := req.GetOmitRendered()
	resp := &historyv1.ReceiveResponse{}
	// issue 18 review N4: leased is the engine's view (LeaseInfo.Held: a lease holds the message)
	// while its deadline is ahead on the engine's clock, which s.now is (WithClock); a server
	// reading another clock than its engine would call a lease expired that the engine still
	// holds, or the reverse. Across replicas, each reads its own clock, as the engines do.
	states := leaseStates(page, s.now())
	var overflow int
	resp.Messages, overflow = fitPageWith(page.Messages, func(m *envelope.Message) *historyv1.Message {
		return s.messageOut(omit).message(m)
	}, func(i int) int { return leaseEntryBytes(page.Messages[i], states[i]) }, s.maxResponse)
	for i, m := range resp.Messages {
		if states[i] != nil {
			if resp.Leases == nil {
				resp.Leases = map[string]*historyv1.LeaseState{}
			}
			resp.Leases[m.GetId()] = states[i]
		}
	}
	next, more := page.Next, page.More
	switch n := len(resp.Messages); {
	case overflow > 0 && n == 0:
		return nil, &exchangeResponseTooLargeError{size: overflow, limit: s.maxResponse,
			messageID: page.Messages[0].ID.String(), what: "Receive's first message"}
	case overflow > 0:
		// Shorter than asked, within the response budget: resume after the last message returned.
		next, more = page.Cursors[n-1], true
	}
	if more {
		resp.NextPageToken = encodeExchangeToken("inbox", inboxScope(owner, sender), next.Inbox, next.Seq)
	}
	return resp, nil
}

// PopMessage removes the oldest message of one sender's inbox (ADR-0006 D5: pop_message), only if
// the response fits in the response budget: the size is checked under the owner's lock, before
// the removal, so a message the client could not be sent stays at the head of its inbox
// (RESOURCE_EXHAUSTED, RESPONSE_TOO_LARGE; issue 11: a destructive read never loses what it could
// not deliver).
func (s *ExchangeServer) PopMessage(ctx context.Context, req *historyv1.PopMessageRequest) (*historyv1.PopMessageResponse, error) {
	owner, err := parseOwnerID("owner_id", req.GetOwnerId())
	if err != nil {
		return nil, err
	}
	sender, err := parseOwnerID("sender", req.GetSender())
	if err != nil {
		return nil, err
	}
	var resp *historyv1.PopMessageResponse
	_, ok, err := s.ex.PopIf(ctx, owner, sender, func(m *envelope.Message) error {
		r := &historyv1.PopMessageResponse{Message: s.messageOut(req.GetOmitRendered()).message(m)}
		if n := proto.Size(r); n > s.maxResponse {
			return &exchangeResponseTooLargeError{size: n, limit: s.maxResponse, messageID: m.ID.String(), what: "PopMessage's response"}
		}
		resp = r
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case !ok:
		return &historyv1.PopMessageResponse{}, nil
	}
	return resp, nil
}

// ListDeadLetters lists one page of an owner's dead letters, oldest first.
func (s *ExchangeServer) ListDeadLetters(ctx context.Context, req *historyv1.ListDeadLettersRequest) (*historyv1.ListDeadLettersResponse, error) {
	owner, err := parseOwnerID("owner_id", req.GetOwnerId())
	if err != nil {
		return nil, err
	}
	size, err := exchangePageSize("page_size", req.GetPageSize())
	if err != nil {
		return nil, err
	}
	after, _, err := decodeExchangeToken("page_token", "dead", scopeKey(owner.String()), req.GetPageToken())
	if err != nil {
		return nil, err
	}
	page, err := s.ex.DeadLetters(ctx, owner, after, size)
	if err != nil {
		return nil, err
	}
	resp := &historyv1.ListDeadLettersResponse{EvictedCount: page.Evicted}
	var overflow int
	o := s.messageOut(req.GetOmitRendered())
	resp.DeadLetters, overflow = fitPage(page.Letters, func(dl exchange.DeadLetter) *historyv1.DeadLetter {
		return deadLetterToProto(dl, o)
	}, s.maxResponse)
	n := len(resp.DeadLetters)
	if overflow > 0 && n == 0 {
		return nil, &exchangeResponseTooLargeError{size: overflow, limit: s.maxResponse,
			messageID: page.Letters[0].Message.ID.String(), what: "ListDeadLetters's first dead letter"}
	}
	if (page.More || overflow > 0) && n > 0 {
		// Past the page, or shorter than asked to stay within the response budget: resume after
		// the last letter returned.
		resp.NextPageToken = encodeExchangeToken("dead", scopeKey(owner.String()), page.Letters[n-1].Seq, 0)
	}
	return resp, nil
}
