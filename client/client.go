package client

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Client is a connection to historyd with its service stubs. Call the generated methods on History
// and Exchange directly; every unary call goes through the retry policy. A Client is safe for
// concurrent use; Close it when done.
type Client struct {
	// History is the HistoryService stub (proto/historyd/v1/history_service.proto).
	History historyv1.HistoryServiceClient
	// Exchange is the ExchangeService stub (proto/historyd/v1/exchange_service.proto).
	Exchange historyv1.ExchangeServiceClient
	// Health is the grpc.health.v1 stub.
	Health healthpb.HealthClient

	conn *grpc.ClientConn
}

// Dial returns a Client for target (a gRPC target such as "127.0.0.1:50051" or
// "dns:///historyd.example:443"). Like grpc.NewClient it does not connect until the first call.
func Dial(target string, opts ...Option) (*Client, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	creds := insecure.NewCredentials()
	if !o.insecure {
		creds = credentials.NewTLS(o.tls)
	}
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds),
		grpc.WithChainUnaryInterceptor(retryInterceptor(o.retry)),
	}
	if o.token != "" {
		dialOpts = append(dialOpts, grpc.WithPerRPCCredentials(bearer{token: o.token, secure: !o.insecure}))
	}
	conn, err := grpc.NewClient(target, append(dialOpts, o.dialOptions...)...)
	if err != nil {
		return nil, fmt.Errorf("client: dial %s: %w", target, err)
	}
	return &Client{
		History:  historyv1.NewHistoryServiceClient(conn),
		Exchange: historyv1.NewExchangeServiceClient(conn),
		Health:   healthpb.NewHealthClient(conn),
		conn:     conn,
	}, nil
}

// Conn returns the underlying connection, for other stubs or its state.
func (c *Client) Conn() *grpc.ClientConn { return c.conn }

// Close closes the connection; calls in flight end with CANCELED.
func (c *Client) Close() error { return c.conn.Close() }

// bearer is the per-RPC credential of WithToken.
type bearer struct {
	token  string
	secure bool
}

// GetRequestMetadata implements credentials.PerRPCCredentials.
func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}

// RequireTransportSecurity implements credentials.PerRPCCredentials: true over TLS, so that grpc
// refuses to send the token if the connection were not secure.
func (b bearer) RequireTransportSecurity() bool { return b.secure }
