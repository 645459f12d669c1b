package client_test

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
)

// The HTTP/2 frame layout the proxy reads (RFC 9113 section 4.1, 6.2).
const (
	frameHeaders = 0x1 // the HEADERS frame type, which starts a response
	frameHeader  = 9   // bytes of a frame header: length (24 bits), type, flags, stream id (32 bits)
)

// armMode is what the proxy does at the server's next response.
type armMode int

const (
	armNone  armMode = iota
	armCut           // close every connection instead of forwarding it
	armStall         // hold it (and the connection behind it) until released
)

// proxy is a TCP proxy between a client and the server that a test can cut: Cut closes every
// connection at once (a network failure mid-stream), and CutBeforeResponse closes them when the
// server starts its next response, so that a request reaches the server and is applied but its
// response never reaches the client (the case a retried mutation must not apply twice), and
// StallBeforeResponse holds that response back instead. It reads the server's HTTP/2 frames to
// find the response's HEADERS frame; it never changes a byte.
type proxy struct {
	t      *testing.T
	lis    net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	armed   armMode       // at the server's next HEADERS frame of a stream
	fired   chan struct{} // closed when the armed action happened
	release chan struct{} // armStall: closed to let the held response through
	accept  int           // connections accepted so far

	wg sync.WaitGroup
}

// newProxy listens on a free port of 127.0.0.1 and forwards to target until the test ends.
func newProxy(t *testing.T, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{t: t, lis: lis, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.serve()
	t.Cleanup(func() {
		lis.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr is the address clients dial.
func (p *proxy) Addr() string { return p.lis.Addr().String() }

// Accepted is the number of client connections accepted so far.
func (p *proxy) Accepted() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.accept
}

// Cut closes every open connection, both sides.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
}

// CutBeforeResponse arms the proxy: the server's next response (its HEADERS frame on a stream)
// is not forwarded, and every connection is closed instead. The returned channel is closed when
// that has happened.
func (p *proxy) CutBeforeResponse() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.fired = armCut, make(chan struct{})
	return p.fired
}

// StallBeforeResponse arms the proxy to hold the server's next response, and everything the
// server sends after it on that connection, until release is called (at the latest when the test
// ends). held is closed when a response is being held.
func (p *proxy) StallBeforeResponse() (held <-chan struct{}, release func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.armed, p.fired, p.release = armStall, make(chan struct{}), make(chan struct{})
	var once sync.Once
	rel := p.release
	release = func() { once.Do(func() { close(rel) }) }
	p.t.Cleanup(release) // runs before newProxy's cleanup waits for the pipes
	return p.fired, release
}

func (p *proxy) serve() {
	defer p.wg.Done()
	for {
		c, err := p.lis.Accept()
		if err != nil {
			return // the listener closed at the end of the test
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.accept++
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(s, c, false) // client to server
		go p.pipe(c, s, true)  // server to client
	}
}

// pipe copies src to dst until either closes; the server-to-client direction goes frame by frame
// so that an armed cut can stop at a response. When it ends it closes both.
func (p *proxy) pipe(dst, src net.Conn, fromServer bool) {
	defer p.wg.Done()
	defer p.drop(dst, src)
	if !fromServer {
		_, _ = io.Copy(dst, src)
		return
	}
	hdr := make([]byte, frameHeader)
	for {
		if _, err := io.ReadFull(src, hdr); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		frame := make([]byte, frameHeader+n)
		copy(frame, hdr)
		if _, err := io.ReadFull(src, frame[frameHeader:]); err != nil {
			return
		}
		stream := binary.BigEndian.Uint32(hdr[5:9]) & 0x7fffffff
		if hdr[3] == frameHeaders && stream != 0 {
			switch mode, release := p.takeArmed(); mode {
			case armCut:
				return // the response is dropped; takeArmed closed every connection
			case armStall:
				<-release
			}
		}
		if _, err := dst.Write(frame); err != nil {
			return
		}
	}
}

// takeArmed disarms the proxy and returns what it was armed for (with the release channel of a
// stall); a cut closes every connection here, and either is announced on fired.
func (p *proxy) takeArmed() (armMode, <-chan struct{}) {
	p.mu.Lock()
	mode, fired, release := p.armed, p.fired, p.release
	p.armed = armNone
	p.mu.Unlock()
	switch mode {
	case armCut:
		p.Cut()
		close(fired)
	case armStall:
		close(fired)
	}
	return mode, release
}

func (p *proxy) drop(a, b net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range []net.Conn{a, b} {
		if err := c.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			p.t.Logf("proxy: close: %v", err)
		}
		delete(p.conns, c)
	}
}
