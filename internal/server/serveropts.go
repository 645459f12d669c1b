package server

import "google.golang.org/grpc"

// serverOptions returns the grpc.ServerOptions of a server configured by o with the given
// interceptor chain: the chain, the tap that refuses calls from their headers (tap.go), the lenient request codec (malformed.go), the transport limits
// (limits.go) and, with WithTLS, the TLS credentials (tls.go).
func serverOptions(o options, unary []grpc.UnaryServerInterceptor, stream []grpc.StreamServerInterceptor) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unary...),
		grpc.ChainStreamInterceptor(stream...),
		grpc.ForceServerCodecV2(newRequestCodec()),
	}
	if o.tap != nil {
		opts = append(opts, grpc.InTapHandle(o.tap.handle))
	}
	opts = append(opts, o.limits.serverOptions()...)
	if o.tls != nil {
		opts = append(opts, grpc.Creds(logHandshakeFailures(o.tls.credentials(), o.logger)))
	}
	return opts
}
