package server

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// Revocation cuts streams (issue 11; ADR-0009). A unary call is checked when it starts and is over
// in moments; a stream (WatchBranch, SubscribeInbox, any server stream) lives for hours on the
// credentials it showed when it opened. openStreams keeps every open stream with those credentials
// (the digest of its bearer token, its client certificate chain) and the means to end it, and
// checks them again when they may have changed:
//
//   - after the tokens file is reloaded (Tokens.Load, on SIGHUP): a stream whose token is no longer
//     in the set ends;
//   - after the TLS files are reloaded (TLS.Reload): a stream whose client certificate no longer
//     verifies against the reloaded client CAs ends;
//   - when its client certificate expires: a timer set to the certificate's NotAfter ends it.
//
// A revoked stream ends at once, in the transport, with UNAUTHENTICATED, reason TOKEN_REVOKED
// (openStream.revoke), whatever its handler waits on; its context is cancelled with a
// *revokedError as its cause, its handler can neither receive nor send again, and the interceptor
// that registered it returns the same status whatever the handler returned. The checks run on the
// goroutine that reloads, under the registry's lock, and only queue a stream's trailers and cancel
// contexts: nothing here blocks on a stream.
type openStreams struct {
	tokens *Tokens // nil: no bearer tokens
	tls    *TLS    // nil, or no client certificates: nothing to check

	mu   sync.Mutex
	open map[*openStream]struct{}
}

// openStream is one registered stream.
type openStream struct {
	digest *[sha256.Size]byte  // the bearer token's digest; nil: none
	chain  []*x509.Certificate // the client certificate and the intermediates it sent; nil: none
	cancel context.CancelCauseFunc
	// end writes the stream's status in the transport, ending it there (streamEnder); nil when
	// the transport stream cannot.
	end     func(*status.Status) error
	revoked atomic.Pointer[revokedError] // set once, by revoke
	expiry  *time.Timer                  // fires at the certificate's NotAfter; nil without one
}

// streamEnder is what grpc-go's transport stream (internal/transport.ServerStream, which
// grpc.ServerTransportStreamFromContext returns) has for the end of a stream: WriteStatus queues the
// trailers with the status, marks the stream done and cancels its context, without blocking. The
// revocation uses it because grpc-go answers a Recv or Send that fails on a cancelled context with
// a status of its own (CANCELED) written at once, before the handler returns: only a status written
// first reaches the client. The interface reaches the method without importing an internal
// package; the revocation tests fail if a grpc-go upgrade takes it away (streams would then still
// end, by the cancellation, but CANCELED).
type streamEnder interface {
	WriteStatus(*status.Status) error
}

// revoke ends s for rv, once: it marks the stream revoked (revocableStream refuses every Recv and
// Send from then on), writes the revocation's status in the transport, which ends a Recv or a Send
// blocked there, and cancels the stream's context for the handler.
func (s *openStream) revoke(rv *revokedError) {
	if !s.revoked.CompareAndSwap(nil, rv) {
		return
	}
	if s.end != nil {
		_ = s.end(rv.grpcStatus()) // fails only for a stream already over
	}
	s.cancel(rv)
}

// revokedError is the cause a revoked stream's context is cancelled with.
type revokedError struct {
	credential string // "bearerToken" or "clientCertificate"
	why        string // "removed", "expired" or "untrusted"
}

func (e *revokedError) Error() string {
	switch e.why {
	case "removed":
		return "the bearer token this stream was opened with has been revoked"
	case "expired":
		return "the client certificate this stream was opened with has expired"
	default:
		return "the client certificate this stream was opened with no longer verifies against the client CAs"
	}
}

// grpcStatus is the UNAUTHENTICATED status (reason TOKEN_REVOKED) the stream ends with.
func (e *revokedError) grpcStatus() *status.Status {
	return withErrorInfo(status.New(codes.Unauthenticated, e.Error()),
		historyv1.ErrorReason_ERROR_REASON_TOKEN_REVOKED,
		map[string]string{"credential": e.credential, "why": e.why})
}

// status is grpcStatus as an error.
func (e *revokedError) status() error { return e.grpcStatus().Err() }

// newOpenStreams returns the registry for a server with tokens and tls (either may be nil), and
// the function that stops it listening to their reloads (Shutdown calls it).
func newOpenStreams(tokens *Tokens, t *TLS) (*openStreams, func()) {
	r := &openStreams{tokens: tokens, tls: t, open: map[*openStream]struct{}{}}
	var removes []func()
	if tokens != nil {
		removes = append(removes, tokens.onReplace(r.checkAll))
	}
	if t != nil && t.MutualTLS() {
		removes = append(removes, t.onReload(r.checkAll))
	}
	return r, func() {
		for _, f := range removes {
			f()
		}
	}
}

// enabled reports whether any stream has credentials to check.
func (r *openStreams) enabled() bool {
	return r.tokens != nil || (r.tls != nil && r.tls.MutualTLS())
}

// interceptor registers each stream for its life and maps a revocation to its status. It sits
// just inside auth, so the streams it sees were authenticated, and the status it returns passes
// the status link unchanged.
//
// A revocation must end the stream whatever its handler waits on: AppendMessages' receiver and
// reflection wait in Recv, a WatchBranch replay sends without waiting on its context. So it ends
// the stream in the transport (openStream.revoke), which ends a Recv or a Send blocked there, and
// the stream handed to the handler (revocableStream) fails every Recv and Send after it with the
// revocation's status: a handler reads nothing more to apply and sends nothing more.
func (r *openStreams) interceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	cancel, ok := streamCancelFrom(ctx)
	if !ok {
		// A stream that did not pass the tap (a server without it, in a test): a context of
		// our own.
		var own context.CancelCauseFunc
		ctx, own = context.WithCancelCause(ctx)
		defer own(nil)
		cancel = own
	}
	s := &openStream{cancel: cancel}
	if p, ok := ctx.Value(principalKey{}).(*principal); ok && r.tokens != nil {
		s.digest = &p.digest
	}
	if r.tls != nil && r.tls.MutualTLS() {
		s.chain = peerChain(ctx)
	}
	if s.digest == nil && s.chain == nil {
		return handler(srv, ss)
	}
	if e, ok := grpc.ServerTransportStreamFromContext(ctx).(streamEnder); ok {
		s.end = e.WriteStatus
	}
	r.add(s)
	defer r.remove(s)
	err := handler(srv, &revocableStream{ServerStream: ss, ctx: ctx, s: s})
	if rv := s.revoked.Load(); rv != nil {
		return rv.status()
	}
	return err
}

// revocableStream is a registered stream as its handler sees it: once the stream is revoked, Recv
// and Send fail with the revocation's status instead of reaching the transport. A message that
// Recv returns as the revocation comes is dropped: the transport may still hold messages the
// client sent before, and a handler must not apply what it is handed after the revocation.
type revocableStream struct {
	grpc.ServerStream
	ctx context.Context
	s   *openStream
}

// Context returns the stream's context, which the revocation cancels.
func (s *revocableStream) Context() context.Context { return s.ctx }

// RecvMsg receives m unless the stream is revoked before or while it waits.
func (s *revocableStream) RecvMsg(m any) error {
	if rv := s.s.revoked.Load(); rv != nil {
		return rv.status()
	}
	err := s.ServerStream.RecvMsg(m)
	if rv := s.s.revoked.Load(); rv != nil {
		return rv.status()
	}
	return err
}

// SendMsg sends m unless the stream is revoked.
func (s *revocableStream) SendMsg(m any) error {
	if rv := s.s.revoked.Load(); rv != nil {
		return rv.status()
	}
	return s.ServerStream.SendMsg(m)
}

// add registers s and checks it once, against the credentials as they are now: a reload between
// the call's authentication and this point is not missed.
func (r *openStreams) add(s *openStream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.open[s] = struct{}{}
	if len(s.chain) > 0 {
		s.expiry = time.AfterFunc(time.Until(s.chain[0].NotAfter), func() {
			s.revoke(&revokedError{credential: "clientCertificate", why: "expired"})
		})
	}
	r.check(s, time.Now())
}

// remove unregisters s and stops its timer.
func (r *openStreams) remove(s *openStream) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.open, s)
	if s.expiry != nil {
		s.expiry.Stop()
	}
}

// checkAll checks every open stream; it runs after each reload.
func (r *openStreams) checkAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	for s := range r.open {
		r.check(s, now)
	}
}

// check cancels s when its credentials are no longer valid at now. r.mu is held.
func (r *openStreams) check(s *openStream, now time.Time) {
	if s.digest != nil && !r.tokens.validDigest(*s.digest) {
		s.revoke(&revokedError{credential: "bearerToken", why: "removed"})
		return
	}
	if len(s.chain) > 0 {
		if why := r.tls.verifyClient(s.chain, now); why != "" {
			s.revoke(&revokedError{credential: "clientCertificate", why: why})
		}
	}
}

// count is the number of registered streams (for tests).
func (r *openStreams) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.open)
}

// peerChain returns the certificate chain the client of ctx presented over TLS, or nil.
func peerChain(ctx context.Context) []*x509.Certificate {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil
	}
	return info.State.PeerCertificates
}

// reloadHooks is what runs after a credential set is replaced (Tokens.Load, TLS.Reload): the open
// streams' revocation check. The zero value is ready to use.
type reloadHooks struct {
	mu sync.Mutex
	fs map[*func()]struct{}
}

// add adds f to what run runs, synchronously and in no set order; remove takes it off. f must not
// block: the reloading caller waits for it.
func (h *reloadHooks) add(f func()) (remove func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.fs == nil {
		h.fs = map[*func()]struct{}{}
	}
	key := &f
	h.fs[key] = struct{}{}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		delete(h.fs, key)
	}
}

// run calls every hook, outside the lock so that a hook may add or remove hooks.
func (h *reloadHooks) run() {
	h.mu.Lock()
	fs := make([]func(), 0, len(h.fs))
	for f := range h.fs {
		fs = append(fs, *f)
	}
	h.mu.Unlock()
	for _, f := range fs {
		f()
	}
}
