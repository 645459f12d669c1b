package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthcheckUsage is the usage text of `historyd healthcheck`.
const healthcheckUsage = `usage: historyd healthcheck [--addr HOST:PORT] [--service NAME] [--timeout DURATION]
                           [--tls] [--tls-ca FILE] [--tls-server-name NAME] [--tls-cert FILE --tls-key FILE]
Calls grpc.health.v1.Health/Check and exits 0 only when the answer is SERVING, 1 otherwise (not
serving, unreachable, timed out), 2 for invalid flags. It is what a container HEALTHCHECK runs: the
image has no shell and no other client. Health needs no bearer token.
`

// healthcheckConfig is the configuration of `historyd healthcheck`.
type healthcheckConfig struct {
	addr, service      string
	timeout            time.Duration
	useTLS             bool
	caFile, serverName string
	certFile, keyFile  string
}

func parseHealthcheck(args []string) (healthcheckConfig, error) {
	var c healthcheckConfig
	fs := flag.NewFlagSet("historyd healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:50051", "address of the historyd to check")
	fs.StringVar(&c.service, "service", "", `service whose status to ask for ("" = the whole server)`)
	fs.DurationVar(&c.timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	fs.BoolVar(&c.useTLS, "tls", false, "connect with TLS (implied by the other --tls-* flags)")
	fs.StringVar(&c.caFile, "tls-ca", "", "PEM CA certificates to verify the server with (default: the system's)")
	fs.StringVar(&c.serverName, "tls-server-name", "", "name to verify the server certificate against (default: the host of --addr)")
	fs.StringVar(&c.certFile, "tls-cert", "", "PEM client certificate, for a server that requires mutual TLS")
	fs.StringVar(&c.keyFile, "tls-key", "", "PEM private key of --tls-cert")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w: %v", errUsage, err)
	}
	switch {
	case fs.NArg() > 0:
		return c, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	case c.timeout <= 0:
		return c, fmt.Errorf("%w: timeout %v: must be positive", errUsage, c.timeout)
	case (c.certFile == "") != (c.keyFile == ""):
		return c, fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	}
	c.useTLS = c.useTLS || c.caFile != "" || c.serverName != "" || c.certFile != ""
	return c, nil
}

// transport returns the dial option for c's transport security.
func (c healthcheckConfig) transport() (grpc.DialOption, error) {
	if !c.useTLS {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.serverName}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s: no PEM certificate", c.caFile)
		}
	}
	if c.certFile != "" {
		pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return nil, err
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
}

// healthcheck is `historyd healthcheck`: it prints the status (or why there is none) on stdout
// and returns the exit code.
func healthcheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c, err := parseHealthcheck(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, healthcheckUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "historyd healthcheck: %v\n%s", err, healthcheckUsage)
		return 2
	}
	creds, err := c.transport()
	if err != nil {
		fmt.Fprintf(stderr, "historyd healthcheck: %v\n", err)
		return 2
	}
	conn, err := grpc.NewClient(c.addr, creds)
	if err != nil {
		fmt.Fprintf(stderr, "historyd healthcheck: %v\n", err)
		return 2
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: c.service})
	if err != nil {
		fmt.Fprintf(stdout, "UNHEALTHY: %s\n", strings.TrimPrefix(err.Error(), "rpc error: "))
		return 1
	}
	fmt.Fprintln(stdout, resp.GetStatus())
	if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		return 1
	}
	return 0
}
