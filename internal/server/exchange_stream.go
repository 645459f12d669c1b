package server

import (
	"context"
	"errors"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
)

// SubscribeInbox streams the messages that land in an owner's inboxes: first a heartbeat (the
// subscription is live from then on), then each message as it is delivered, and heartbeats while
// idle (docs/design.md#exchange). With lease set it streams leased messages instead
// (exchange_stream_lease.go). One loop shape (docs/development.md#style-streams): validate,
// subscribe, defer unsubscribe, select over the context, shutdown, the subscription's end, its
// events and the heartbeat.
func (s *ExchangeServer) SubscribeInbox(req *historyv1.SubscribeInboxRequest, stream grpc.ServerStreamingServer[historyv1.SubscribeInboxResponse]) (err error) {
	if s.streamEnded != nil {
		defer func() { s.streamEnded(err) }()
	}
	owner, sender, err := parseInboxScope(req.GetOwnerId(), req.Sender)
	if err != nil {
		return err
	}
	lease, err := leaseStreamFromProto(req)
	if err != nil {
		return err
	}
	var subOpts []exchange.SubscribeOption
	if req.GetLease() {
		// The leasing stream reads events only as wake-ups (issue 18 review M2): a burst that
		// fills the buffer must not end it as too slow.
		subOpts = append(subOpts, exchange.WakeOnly())
	}
	sub, unsubscribe, err := s.ex.Subscribe(stream.Context(), owner, sender, subOpts...)
	if errors.Is(err, exchange.ErrTooManySubscriptions) {
		return &flagError{err: err, flag: inboxMaxStreamsFlag}
	}
	if err != nil {
		return err
	}
	defer unsubscribe()

	st := &inboxStream{s: s, owner: owner, sender: sender, sub: sub, out: s.messageOut(req.GetOmitRendered()),
		left:   &exchange.OwnerError{Owner: owner, Role: "Owner", Err: exchange.ErrOwnerNotRegistered},
		frames: newStreamSender(stream, s.streams.sendTimeout)}
	defer st.frames.close()
	if err := st.send(s.heartbeatFrame()); err != nil {
		return err
	}
	st.hb = newHeartbeat(s.streams.heartbeat)
	defer st.hb.Stop()
	if req.GetLease() {
		return st.leaseLoop(stream.Context(), lease)
	}
	return st.liveLoop(stream.Context())
}

// inboxStream is one SubscribeInbox stream's state, shared by its live and leasing loops.
type inboxStream struct {
	s      *ExchangeServer
	owner  uuid.UUID
	sender *uuid.UUID
	sub    *exchange.Subscription
	out    messageOut
	left   *exchange.OwnerError // the error that ends the stream when the owner leaves
	frames *streamSender
	hb     *heartbeat
}

// send sends one frame, bounded by the send timeout, and turns its failures into the errors that
// end the stream: too slow, or the subscription's end (the owner left, shutdown).
func (st *inboxStream) send(frame *historyv1.SubscribeInboxResponse) error {
	err := st.frames.send(frame, st.sub.Done(), st.s.stopping)
	switch {
	case errors.Is(err, errSendTimeout):
		return tooSlow(err, st.left.ErrorMetadata())
	case errors.Is(err, errSendAborted):
		return st.s.inboxStreamEnd(st.sub, st.left)
	}
	return err
}

// beat sends a heartbeat and starts the next idle interval.
func (st *inboxStream) beat() error {
	if err := st.send(st.s.heartbeatFrame()); err != nil {
		return err
	}
	st.hb.Reset()
	return nil
}

// liveLoop streams each message as it lands: a live view that takes nothing.
func (st *inboxStream) liveLoop(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-st.s.stopping:
			return errShuttingDown
		case <-st.sub.Done():
			return st.s.inboxStreamEnd(st.sub, st.left)
		case m := <-st.sub.Events():
			frame := &historyv1.SubscribeInboxResponse{Event: &historyv1.SubscribeInboxResponse_Message{
				Message: st.out.message(m),
			}}
			if n := proto.Size(frame); n > st.s.maxResponse {
				// The message stays in its inbox (a stream only tells): the client reads it with
				// Receive or PopMessage and omit_rendered.
				return &exchangeResponseTooLargeError{size: n, limit: st.s.maxResponse, messageID: m.ID.String(),
					what: "the SubscribeInbox frame of a message"}
			}
			if err := st.send(frame); err != nil {
				return err
			}
			st.hb.Reset()
		case <-st.hb.C():
			if err := st.beat(); err != nil {
				return err
			}
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
