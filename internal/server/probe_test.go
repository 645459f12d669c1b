package server

import (
	"context"
	"errors"
	"fmt"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// The probe service exists only in tests: it lets them drive the production interceptor chain with
// a handler that succeeds, fails with a chosen error, or panics, over unary and streaming calls. Its
// request is a structpb.Value whose string names the behaviour.

const (
	probeService      = "historyd.test.Probe"
	probeUnaryMethod  = "/" + probeService + "/Unary"
	probeStreamMethod = "/" + probeService + "/Stream"
)

// errProbeSecret is an unexpected error whose text must never reach a client.
var errProbeSecret = errors.New("probe: secret database password in this message")

// probeBehave is what the probe handler does for a request string.
func probeBehave(ctx context.Context, what string) (*structpb.Value, error) {
	switch what {
	case "ok":
		return structpb.NewStringValue("ok"), nil
	case "unknown":
		return nil, fmt.Errorf("probe: wrapped: %w", errProbeSecret)
	case "field":
		return nil, &FieldError{Field: "message.sender", Err: errors.New("not null or a string")}
	case "canceled":
		return nil, fmt.Errorf("probe: waiting: %w", context.Canceled)
	case "panic":
		panic("probe: " + errProbeSecret.Error())
	}
	return nil, fmt.Errorf("probe: unknown behaviour %q", what)
}

var probeDesc = grpc.ServiceDesc{
	ServiceName: probeService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Unary",
		Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(structpb.Value)
			if err := dec(in); err != nil {
				return nil, err
			}
			handler := func(ctx context.Context, req any) (any, error) {
				return probeBehave(ctx, req.(*structpb.Value).GetStringValue())
			}
			return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: probeUnaryMethod}, handler)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName:    "Stream",
		ServerStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			in := new(structpb.Value)
			if err := stream.RecvMsg(in); err != nil {
				return err
			}
			out, err := probeBehave(stream.Context(), in.GetStringValue())
			if err != nil {
				return err
			}
			return stream.SendMsg(out)
		},
	}},
}

func registerProbe(s *grpc.Server) { s.RegisterService(&probeDesc, struct{}{}) }

// callProbeUnary calls the probe's unary method with what.
func callProbeUnary(ctx context.Context, conn *grpc.ClientConn, what string) error {
	return conn.Invoke(ctx, probeUnaryMethod, structpb.NewStringValue(what), new(structpb.Value))
}

// callProbeStream opens the probe's server stream with what and reads it to its end.
func callProbeStream(ctx context.Context, conn *grpc.ClientConn, what string) error {
	stream, err := conn.NewStream(ctx, &probeDesc.Streams[0], probeStreamMethod)
	if err != nil {
		return err
	}
	if err := stream.SendMsg(structpb.NewStringValue(what)); err != nil {
		return err
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	for {
		if err := stream.RecvMsg(new(structpb.Value)); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}
