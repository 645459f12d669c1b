package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
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

It reads the server's own HISTORYD_* variables, so that it checks the server configured beside it:
  --addr      defaults to HISTORYD_LISTEN (default 127.0.0.1:50051), with a 0.0.0.0, [::] or empty
              host checked at 127.0.0.1; port 0 is an error (the port is only known to the server)
  TLS         HISTORYD_TLS_CERT set: connect with TLS and accept exactly that certificate (the
              server's own; no host name check), unless --tls-ca or --tls-server-name say otherwise
  mutual TLS  HISTORYD_TLS_CLIENT_CA set and no --tls-cert: present HISTORYD_TLS_CERT and
              HISTORYD_TLS_KEY as the client certificate (it must allow client authentication)
Services: "" (the whole server), historyd.v1.HistoryService, historyd.v1.ExchangeService,
historyd.v1.AdminService.
`

// healthcheckConfig is the configuration of `historyd healthcheck`.
type healthcheckConfig struct {
	connConfig
	service string
	timeout time.Duration
}

// connConfig is how a subcommand reaches the server configured beside it: the address and TLS
// flags that healthcheck and backup share.
type connConfig struct {
	addr               string
	useTLS             bool
	caFile, serverName string
	certFile, keyFile  string
	// pinFile, when set, is the server's own certificate file (HISTORYD_TLS_CERT): the server must
	// present a certificate from it.
	pinFile string
}

// defaultHealthcheckAddr is where healthcheck looks without --addr: the server's HISTORYD_LISTEN.
func defaultHealthcheckAddr(getenv func(string) string) string {
	if a := getenv("HISTORYD_LISTEN"); a != "" {
		return a
	}
	return settings[0].def
}

// checkAddr maps a listen address to the address to check: a wildcard or empty host is checked on
// loopback; the port must be a real one.
func checkAddr(addr, source string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("%w: invalid %s %q: %v; want host:port, such as 127.0.0.1:50051", errUsage, source, addr, err)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	switch {
	case err != nil:
		return "", fmt.Errorf("%w: invalid %s %q: port %q is not a number from 1 to 65535; want host:port, such as 127.0.0.1:50051", errUsage, source, addr, port)
	case n == 0:
		return "", fmt.Errorf("%w: %s %q has port 0, which lets the server pick a free port that only it knows; give the port it listens on with --addr, such as --addr 127.0.0.1:50051", errUsage, source, addr)
	}
	switch host {
	case "", "0.0.0.0", "::":
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

func parseHealthcheck(args []string, getenv func(string) string) (healthcheckConfig, error) {
	var c healthcheckConfig
	fs := flag.NewFlagSet("historyd healthcheck", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.connConfig.flags(fs)
	fs.StringVar(&c.service, "service", "", `service whose status to ask for ("" = the whole server)`)
	fs.DurationVar(&c.timeout, "timeout", 3*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return c, err
		}
		return c, fmt.Errorf("%w: %s", errUsage, flagError(fs, err))
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if c.timeout <= 0 {
		return c, badValue("timeout", "%v: must be positive, such as 3s", c.timeout)
	}
	return c, c.connConfig.resolve(getenv)
}

// flags adds the connection flags to fs.
func (c *connConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "", "address of the historyd (default: HISTORYD_LISTEN)")
	fs.BoolVar(&c.useTLS, "tls", false, "connect with TLS (implied by the other --tls-* flags)")
	fs.StringVar(&c.caFile, "tls-ca", "", "PEM CA certificates to verify the server with (default: the system's)")
	fs.StringVar(&c.serverName, "tls-server-name", "", "name to verify the server certificate against (default: the host of --addr)")
	fs.StringVar(&c.certFile, "tls-cert", "", "PEM client certificate, for a server that requires mutual TLS")
	fs.StringVar(&c.keyFile, "tls-key", "", "PEM private key of --tls-cert")
}

// resolve completes the parsed flags from the server's own HISTORYD_* variables: the address
// defaults to HISTORYD_LISTEN, and without TLS flags HISTORYD_TLS_* say how to connect.
func (c *connConfig) resolve(getenv func(string) string) error {
	source := "--addr"
	if c.addr == "" {
		c.addr, source = defaultHealthcheckAddr(getenv), "HISTORYD_LISTEN"
		if getenv("HISTORYD_LISTEN") == "" {
			source = "default address"
		}
	}
	addr, err := checkAddr(c.addr, source)
	if err != nil {
		return err
	}
	c.addr = addr
	if (c.certFile == "") != (c.keyFile == "") {
		return usagef([]string{"tls-cert", "tls-key"}, "--tls-cert and --tls-key go together")
	}
	c.useTLS = c.useTLS || c.caFile != "" || c.serverName != "" || c.certFile != ""
	// The server's own TLS settings, when the flags do not say how to connect.
	if serverCert := getenv("HISTORYD_TLS_CERT"); serverCert != "" {
		c.useTLS = true
		if c.caFile == "" && c.serverName == "" {
			c.pinFile = serverCert
		}
		if c.certFile == "" && getenv("HISTORYD_TLS_CLIENT_CA") != "" {
			c.certFile, c.keyFile = serverCert, getenv("HISTORYD_TLS_KEY")
		}
	}
	return nil
}

// transport returns the dial option for c's transport security.
func (c connConfig) transport() (grpc.DialOption, error) {
	if !c.useTLS {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.serverName}
	if c.pinFile != "" {
		pinned, err := pinnedCertificates(c.pinFile)
		if err != nil {
			return nil, err
		}
		// The server's own certificate is the trust anchor: its exact bytes, not a name, are checked.
		cfg.InsecureSkipVerify = true
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) > 0 && slices.ContainsFunc(pinned, func(raw []byte) bool { return bytes.Equal(raw, cs.PeerCertificates[0].Raw) }) {
				return nil
			}
			return fmt.Errorf("the server's certificate is not the one in %s (HISTORYD_TLS_CERT)", c.pinFile)
		}
	}
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

// pinnedCertificates returns the DER bytes of the certificates in a PEM file.
func pinnedCertificates(file string) ([][]byte, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			break
		}
		if block.Type == "CERTIFICATE" {
			out = append(out, block.Bytes)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no PEM certificate", file)
	}
	return out, nil
}

// healthcheck is `historyd healthcheck`: it prints the status (or why there is none) on stdout
// and returns the exit code.
func healthcheck(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	c, err := parseHealthcheck(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, healthcheckUsage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "historyd healthcheck: %v (historyd healthcheck --help lists the flags)\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
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
