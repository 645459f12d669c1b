package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// TODO(issue 18): the lease RPCs; replaced by their handlers, nothing may ship with these.

func (s *ExchangeServer) Lease(context.Context, *historyv1.LeaseRequest) (*historyv1.LeaseResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Lease: issue 18 in progress")
}

func (s *ExchangeServer) Ack(context.Context, *historyv1.AckRequest) (*historyv1.AckResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Ack: issue 18 in progress")
}

func (s *ExchangeServer) Nack(context.Context, *historyv1.NackRequest) (*historyv1.NackResponse, error) {
	return nil, status.Error(codes.Unimplemented, "Nack: issue 18 in progress")
}

func (s *ExchangeServer) ExtendLease(context.Context, *historyv1.ExtendLeaseRequest) (*historyv1.ExtendLeaseResponse, error) {
	return nil, status.Error(codes.Unimplemented, "ExtendLease: issue 18 in progress")
}
