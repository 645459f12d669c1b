package server

import (
	"errors"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
)

// SubscribeInbox streams the messages that land in an owner's inboxes: first a heartbeat (the
// subscription is live from then on), then each message as it is delivered, and heartbeats while
// idle (docs/design.md#exchange). One loop shape (docs/development.md#style-streams): validate, subscribe, defer
// unsubscribe, select over the context, shutdown, the subscription's end, its events and the
// heartbeat.
func (s *ExchangeServer) SubscribeInbox(req *historyv1.SubscribeInboxRequest, stream grpc.ServerStreamingServer[historyv1.SubscribeInboxResponse]) (err error) {
	if s.streamEnded != nil {
		defer func() { s.streamEnded(err) }()
	}
	owner, err := parseOwnerID("owner_id", req.GetOwnerId())
	if err != nil {
		return err
	}
	sender, err := parseOptionalOwnerID("sender", req.Sender)
	if err != nil {
		return err
	}
	sub, unsubscribe, err := s.ex.Subscribe(stream.Context(), owner, sender)
	if errors.Is(err, exchange.ErrTooManySubscriptions) {
		return &flagError{err: err, flag: inboxMaxStreamsFlag}
	}
	if err != nil {
		return err
	}
	defer unsubscribe()

	left := &exchange.OwnerError{Owner: owner, Role: "Owner", Err: exchange.ErrOwnerNotRegistered}
	md := left.ErrorMetadata()
	out := newStreamSender(stream, s.streams.sendTimeout)
	defer out.close()
	send := func(frame *historyv1.SubscribeInboxResponse) error {
		err := out.send(frame, sub.Done(), s.stopping)
		switch {
		case errors.Is(err, errSendTimeout):
			return tooSlow(err, md)
		case errors.Is(err, errSendAborted):
			return s.inboxStreamEnd(sub, left)
		}
		return err
	}
	if err := send(s.heartbeatFrame()); err != nil {
		return err
	}
	hb := newHeartbeat(s.streams.heartbeat)
	defer hb.Stop()
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.stopping:
			return errShuttingDown
		case <-sub.Done():
			return s.inboxStreamEnd(sub, left)
		case m := <-sub.Events():
			frame := &historyv1.SubscribeInboxResponse{Event: &historyv1.SubscribeInboxResponse_Message{
				Message: s.messageOut(req.GetOmitRendered()).message(m),
			}}
			if n := proto.Size(frame); n > s.maxResponse {
				// The message stays in its inbox (a stream only tells): the client reads it with
				// Receive or PopMessage and omit_rendered.
				return &exchangeResponseTooLargeError{size: n, limit: s.maxResponse, messageID: m.ID.String(),
					what: "the SubscribeInbox frame of a message"}
			}
			if err := send(frame); err != nil {
				return err
			}
			hb.Reset()
		case <-hb.C():
			if err := send(s.heartbeatFrame()); err != nil {
				return err
			}
			hb.Reset()
		}
	}
}

// inboxStreamEnd is the error that ends an inbox stream once its subscription ended or the server
// is stopping: too slow (evicted), the owner left (left, the OwnerError naming it), or shutdown
// (also when the Exchange was closed).
func (s *ExchangeServer) inboxStreamEnd(sub *exchange.Subscription, left *exchange.OwnerError) error {
	select {
	case <-sub.Done():
		switch err := sub.Err(); {
		case errors.Is(err, exchange.ErrSubscriberTooSlow):
			return tooSlow(err, left.ErrorMetadata())
		case errors.Is(err, exchange.ErrOwnerNotRegistered):
			return left // FAILED_PRECONDITION, OWNER_NOT_REGISTERED, naming the owner
		}
	default:
	}
	return errShuttingDown
}

func (s *ExchangeServer) heartbeatFrame() *historyv1.SubscribeInboxResponse {
	return &historyv1.SubscribeInboxResponse{Event: &historyv1.SubscribeInboxResponse_Heartbeat{
		Heartbeat: &historyv1.Heartbeat{Time: timestamppb.New(s.now())},
	}}
}
