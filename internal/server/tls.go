package server

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// ErrNoClientCAs is returned for a client CA file that holds no PEM certificate.
var ErrNoClientCAs = errors.New("no PEM certificate in the client CA file")

// TLSFiles names the PEM files of the server's TLS identity. CertFile and KeyFile are the server's
// certificate chain and private key; ClientCAFile, when not empty, turns on mutual TLS: every client
// must present a certificate that chains to one of its CAs and is valid now.
type TLSFiles struct {
	CertFile, KeyFile, ClientCAFile string
}

// TLS is the server's TLS identity, reloadable while the server runs: Reload reads the files again
// and the next handshake uses them; connections already open keep what they negotiated.
type TLS struct {
	files TLSFiles
	state atomic.Pointer[tlsState]

	hooks reloadHooks // run after each successful Reload (revoke.go)
}

type tlsState struct {
	cert      *tls.Certificate
	clientCAs *x509.CertPool // nil: no client certificates asked for
}

// LoadTLS reads files and returns the identity built from them.
func LoadTLS(files TLSFiles) (*TLS, error) {
	t := &TLS{files: files}
	if err := t.Reload(); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload reads the files again and, only if they all load, switches to them; on error the current
// identity stays in use.
func (t *TLS) Reload() error {
	cert, err := tls.LoadX509KeyPair(t.files.CertFile, t.files.KeyFile)
	if err != nil {
		return fmt.Errorf("loading the TLS certificate %s and key %s: %w", t.files.CertFile, t.files.KeyFile, err)
	}
	st := &tlsState{cert: &cert}
	if t.files.ClientCAFile != "" {
		pem, err := os.ReadFile(t.files.ClientCAFile)
		if err != nil {
			return fmt.Errorf("loading the client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%s: %w", t.files.ClientCAFile, ErrNoClientCAs)
		}
		st.clientCAs = pool
	}
	t.state.Store(st)
	t.hooks.run()
	return nil
}

// onReload adds f to what runs, synchronously, after each successful Reload; remove takes it off.
// f must not block.
func (t *TLS) onReload(f func()) (remove func()) {
	return t.hooks.add(f)
}

// verifyClient checks a client certificate chain (the leaf first, then the intermediates the
// client sent) as the handshake would, against the client CAs loaded last, at now. It returns ""
// when it verifies, "expired" when the leaf is past its NotAfter, and "untrusted" otherwise.
func (t *TLS) verifyClient(chain []*x509.Certificate, now time.Time) string {
	if now.After(chain[0].NotAfter) {
		return "expired"
	}
	st := t.state.Load()
	if st.clientCAs == nil {
		return ""
	}
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{
		Roots:         st.clientCAs,
		Intermediates: inter,
		CurrentTime:   now,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		if ie, ok := errors.AsType[x509.CertificateInvalidError](err); ok && ie.Reason == x509.Expired {
			return "expired"
		}
		return "untrusted"
	}
	return ""
}

// MutualTLS reports whether clients must present a certificate.
func (t *TLS) MutualTLS() bool { return t.files.ClientCAFile != "" }

// Config returns a tls.Config whose every handshake uses the identity loaded last: TLS 1.2 at
// least, and with mutual TLS, a client certificate verified against the client CAs (an expired,
// not-yet-valid or unknown certificate fails the handshake).
func (t *TLS) Config() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			st := t.state.Load()
			c := &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*st.cert},
				NextProtos:   []string{"h2"},
			}
			if st.clientCAs != nil {
				c.ClientAuth = tls.RequireAndVerifyClientCert
				c.ClientCAs = st.clientCAs
			}
			return c, nil
		},
	}
}

// WithTLS serves TLS (and mutual TLS when t has client CAs) instead of plaintext. The default, and a
// nil t, is plaintext.
func WithTLS(t *TLS) Option {
	return func(o *options) { o.tls = t }
}

// credentials returns the transport credentials of t.
func (t *TLS) credentials() credentials.TransportCredentials {
	return credentials.NewTLS(t.Config())
}
