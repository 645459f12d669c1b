package server

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// wantRevoked reads stream to its end and checks that it ended UNAUTHENTICATED, reason
// TOKEN_REVOKED, with the credential and why given.
func wantRevoked(t *testing.T, stream grpc.ClientStream, credential, why string) {
	t.Helper()
	var err error
	for err == nil {
		err = stream.RecvMsg(new(structpb.Value))
	}
	ei := wantStatusInfo(t, err, codes.Unauthenticated, historyv1.ErrorReason_ERROR_REASON_TOKEN_REVOKED)
	if md := ei.GetMetadata(); md["credential"] != credential || md["why"] != why {
		t.Errorf("ErrorInfo metadata %v, want credential %s, why %s", md, credential, why)
	}
}

// TestRevokedTokenEndsStreams: issue 11 "Revocation cuts streams. After a reload, every open stream
// whose token is no longer valid ends with UNAUTHENTICATED, reason ERROR_REASON_TOKEN_REVOKED"; a
// stream whose token stays valid keeps going.
func TestRevokedTokenEndsStreams(t *testing.T) {
	const kept = "kept-token-0123456789abcdef"
	path := filepath.Join(t.TempDir(), "tokens")
	writeFile(t, path, []byte(testToken+"\n"+kept+"\n"))
	tokens, err := LoadTokensFile(path)
	if err != nil {
		t.Fatal(err)
	}
	entered := make(holdEntered, 4)
	ts := newTestServer(t, registerHold(entered), WithAuthTokens(tokens))
	revoked := openHoldStream(t, withToken(testContext(t), testToken), ts.conn)
	keptCtx, cancelKept := context.WithCancel(withToken(testContext(t), kept))
	defer cancelKept()
	keptStream := openHoldStream(t, keptCtx, ts.conn)
	<-entered
	<-entered
	if n := ts.streams.count(); n != 2 {
		t.Fatalf("%d streams registered, want 2", n)
	}

	writeFile(t, path, []byte(kept+"\n"))
	if err := tokens.Load(path); err != nil {
		t.Fatal(err)
	}
	wantRevoked(t, revoked, "bearerToken", "removed")
	eventually(t, "the revoked stream unregistered", func() bool { return ts.streams.count() == 1 })

	// The kept stream is still open: it ends only when its client cancels it.
	cancelKept()
	if err := keptStream.RecvMsg(new(structpb.Value)); status.Code(err) != codes.Canceled {
		t.Errorf("the stream with the kept token ended %v, want CANCELED by its client", err)
	}
	eventually(t, "every stream unregistered", func() bool { return ts.streams.count() == 0 })

	// A stream opened after the reload with the old token never opens.
	desc := holdDesc(nil).Streams[0]
	s, err := ts.conn.NewStream(withToken(testContext(t), testToken), &desc, holdStreamMethod)
	if err == nil {
		_ = s.SendMsg(structpb.NewStringValue("hold"))
		err = s.RecvMsg(new(structpb.Value))
	}
	wantStatusInfo(t, err, codes.Unauthenticated, historyv1.ErrorReason_ERROR_REASON_UNAUTHENTICATED)
}

// mutualTLSServer starts a test server with mutual TLS trusting ca and returns it with its identity
// and the path of its client CA file.
func mutualTLSServer(t *testing.T, ca *testCA, register func(*grpc.Server)) (*testServer, *TLS, string) {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	srvCert, srvKey := ca.issue(t, "historyd", true, now.Add(-time.Hour), now.Add(time.Hour))
	writeFile(t, filepath.Join(dir, "server.pem"), srvCert)
	writeFile(t, filepath.Join(dir, "server.key"), srvKey)
	caPath := filepath.Join(dir, "ca.pem")
	writeFile(t, caPath, ca.pem)
	id, err := LoadTLS(TLSFiles{
		CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server.key"), ClientCAFile: caPath,
	})
	if err != nil {
		t.Fatalf("LoadTLS: %v", err)
	}
	return newTestServer(t, register, WithTLS(id)), id, caPath
}

// TestExpiredCertificateEndsStreams: issue 11: "likewise a TLS stream whose client certificate has
// expired": a timer at the certificate's NotAfter ends the stream, UNAUTHENTICATED, TOKEN_REVOKED.
func TestExpiredCertificateEndsStreams(t *testing.T) {
	ca := newTestCA(t, "historyd test CA")
	entered := make(holdEntered, 2)
	ts, _, _ := mutualTLSServer(t, ca, registerHold(entered))
	now := time.Now()
	// x509 keeps whole seconds: valid now, expired within two seconds.
	shortCert, shortKey := ca.issue(t, "short-lived", false, now.Add(-time.Hour), now.Add(2*time.Second))
	longCert, longKey := ca.issue(t, "long-lived", false, now.Add(-time.Hour), now.Add(time.Hour))
	short := openHoldStream(t, testContext(t), ts.dial(t, clientTLS(t, ca, shortCert, shortKey)))
	longCtx, cancelLong := context.WithCancel(testContext(t))
	defer cancelLong()
	openHoldStream(t, longCtx, ts.dial(t, clientTLS(t, ca, longCert, longKey)))
	<-entered
	<-entered
	wantRevoked(t, short, "clientCertificate", "expired")
	eventually(t, "the expired stream unregistered", func() bool { return ts.streams.count() == 1 })
}

// TestUntrustedCertificateEndsStreams: issue 11: "... or no longer verifies against a reloaded
// client CA": after the client CA file is replaced and reloaded, a stream whose certificate the new
// CAs did not issue ends, and one whose certificate they did issue keeps going.
func TestUntrustedCertificateEndsStreams(t *testing.T) {
	first, second := newTestCA(t, "first CA"), newTestCA(t, "second CA")
	entered := make(holdEntered, 2)
	ts, id, caPath := mutualTLSServer(t, first, registerHold(entered))
	writeFile(t, caPath, append(append([]byte{}, first.pem...), second.pem...))
	if err := id.Reload(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	oldCert, oldKey := first.issue(t, "old", false, now.Add(-time.Hour), now.Add(time.Hour))
	newCert, newKey := second.issue(t, "new", false, now.Add(-time.Hour), now.Add(time.Hour))
	trustBoth := func(cert, key []byte) grpc.DialOption { return clientTLS(t, first, cert, key) }
	old := openHoldStream(t, testContext(t), ts.dial(t, trustBoth(oldCert, oldKey)))
	newCtx, cancelNew := context.WithCancel(testContext(t))
	defer cancelNew()
	openHoldStream(t, newCtx, ts.dial(t, trustBoth(newCert, newKey)))
	<-entered
	<-entered

	writeFile(t, caPath, second.pem) // the first CA is retired
	if err := id.Reload(); err != nil {
		t.Fatal(err)
	}
	wantRevoked(t, old, "clientCertificate", "untrusted")
	eventually(t, "the untrusted stream unregistered", func() bool { return ts.streams.count() == 1 })
}
