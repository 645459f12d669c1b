package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
	"github.com/historyd/historyd/internal/store/storetest"
)

// proxy is a TCP proxy to the PostgreSQL server that a test starts late,
// cuts and restores (issue 16: "Test it through a small TCP proxy written
// in the test, which the test cuts and restores"). Its goroutines stop at
// down and close.
type proxy struct {
	addr, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newProxy reserves a local port for a proxy to target, not yet
// listening: connections to it are refused until up.
func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: ln.Addr().String(), target: target, conns: map[net.Conn]struct{}{}}
	ln.Close()
	t.Cleanup(p.close)
	return p
}

// up starts accepting on the proxy's port.
func (p *proxy) up(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go p.accept(ln)
}

func (p *proxy) accept(ln net.Listener) {
	defer p.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		d, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[d] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(c, d)
		go p.pipe(d, c)
	}
}

func (p *proxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	io.Copy(dst, src) //nolint:errcheck // ends when either side closes
	dst.Close()
	src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// down stops accepting and cuts every connection.
func (p *proxy) down() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *proxy) close() {
	p.down()
	p.wg.Wait()
}

// viaProxy returns a fresh schema's URL and a proxy to its server (down).
func viaProxy(t testing.TB) (string, *proxy) {
	t.Helper()
	u, err := url.Parse(pgtest.New(t))
	if err != nil {
		t.Fatal(err)
	}
	p := newProxy(t, u.Host)
	u.Host = p.addr
	return u.String(), p
}

// waitHealth waits until the Store's health is usable (want nil) or not.
func waitHealth(t testing.TB, s *Store, usable bool, d time.Duration) error {
	t.Helper()
	deadline := time.After(d)
	for {
		changed, err := s.Health()
		if (err == nil) == usable {
			return err
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("health still %v after %v, want usable=%v", err, d, usable)
		}
	}
}

// Issue 16: "PostgreSQL unreachable at start: historyd retries with
// backoff, health NOT_SERVING until it connects, a clear log line".
func TestUnreachableAtStart(t *testing.T) {
	u, p := viaProxy(t)
	s := openTest(t, testConfig(u, storetest.Options{}))
	_, err := s.Health()
	if err == nil || !errors.Is(err, store.ErrStorageUnavailable) || !strings.Contains(err.Error(), "unreachable") ||
		!strings.Contains(err.Error(), "retrying") || !strings.Contains(err.Error(), s.Target()) {
		t.Fatalf("health before the server answers: %v", err)
	}
	if _, err := s.CreateBranch(tctx(t), store.CreateBranchInput{}); !errors.Is(err, store.ErrStorageUnavailable) {
		t.Fatalf("CreateBranch before the server answers: %v, want ErrStorageUnavailable", err)
	}
	if _, err := s.GetBranch(tctx(t), uuid.New()); !errors.Is(err, store.ErrStorageUnavailable) {
		t.Fatalf("GetBranch before the server answers: %v, want ErrStorageUnavailable", err)
	}
	p.up(t)
	waitHealth(t, s, true, 15*time.Second)
	br := newBranch(t, s)
	add(t, s, br, "connected", store.WriteOptions{})
}

// A URL that does not parse fails Open at once; so does a schema newer
// than the server, before any retry.
func TestOpenRefuses(t *testing.T) {
	if _, err := Open(tctx(t), Config{URL: "postgres://%zz"}); err == nil {
		t.Fatal("Open of a URL that does not parse succeeded")
	}
	u := pgtest.New(t)
	s := openReady(t, testConfig(u, storetest.Options{}))
	if _, err := s.pool.Exec(tctx(t), `INSERT INTO goose_db_version (version_id, is_applied) VALUES (999, true)`); err != nil {
		t.Fatal(err)
	}
	if s2, err := Open(tctx(t), testConfig(u, storetest.Options{})); err == nil || !strings.Contains(err.Error(), "newer") {
		if s2 != nil {
			s2.Close()
		}
		t.Fatalf("Open of a newer schema: %v", err)
	}
}

// Issue 16: "the connection lost mid-run: calls fail UNAVAILABLE
// (retryable), nothing half-applied, open streams end UNAVAILABLE and the
// client package resumes them; health follows".
func TestConnectionLost(t *testing.T) {
	u, p := viaProxy(t)
	p.up(t)
	s := openTest(t, testConfig(u, storetest.Options{}))
	waitHealth(t, s, true, 15*time.Second)
	listening(t, s)
	br := newBranch(t, s)
	sub, err := s.Subscribe(tctx(t), br, store.SubscribeInput{After: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()

	// Writers that retry each request id until it is acknowledged, as a
	// client does, through the cut.
	const writers, each = 4, 15
	var (
		wg          sync.WaitGroup
		unavailable sync.Map
		stopAt      = time.Now().Add(60 * time.Second)
	)
	// Every writer's writes from each/3 on start once the proxy is down, so
	// that writes meet the cut however fast the others went (group commit
	// made a branch's writes fast enough to finish before it).
	cut, downed := make(chan struct{}), make(chan struct{})
	// metCut is closed by the first write the cut refused: the proxy stays
	// down until then. Without it, on a loaded machine the writers woke
	// only after the proxy was up again (7 runs in 60 failed "no write met
	// the cut").
	metCut, met := make(chan struct{}), sync.Once{}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				if i == each/3 {
					if w == 0 {
						close(cut)
					}
					<-downed
				}
				for {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					_, err := s.AddMessage(ctx, br, store.AddInput{Factory: addFactory(id)}, store.WriteOptions{RequestID: id})
					cancel()
					if err == nil {
						break
					}
					if !errors.Is(err, store.ErrStorageUnavailable) {
						t.Errorf("write %s: %v, want ErrStorageUnavailable or success", id, err)
						return
					}
					unavailable.Store(id, true)
					met.Do(func() { close(metCut) })
					if time.Now().After(stopAt) {
						t.Errorf("write %s never succeeded", id)
						return
					}
					time.Sleep(20 * time.Millisecond) // the client's retry backoff
				}
			}
		}()
	}
	<-cut
	p.down()
	close(downed)
	// The subscription ends retryable.
	for {
		_, err := sub.Next(tctx(t))
		if err != nil {
			if !errors.Is(err, store.ErrStorageUnavailable) {
				t.Fatalf("the subscription ended with %v, want ErrStorageUnavailable", err)
			}
			break
		}
	}
	waitHealth(t, s, false, 15*time.Second)
	if _, err := s.GetBranch(tctx(t), br); !errors.Is(err, store.ErrStorageUnavailable) {
		t.Fatalf("GetBranch with the connection cut: %v, want ErrStorageUnavailable", err)
	}
	select {
	case <-metCut:
	case <-time.After(30 * time.Second): // the check below reports it
	}
	p.up(t)
	waitHealth(t, s, true, 15*time.Second)
	wg.Wait()
	if t.Failed() {
		return
	}
	n := 0
	unavailable.Range(func(any, any) bool { n++; return true })
	if n == 0 {
		t.Fatal("no write met the cut: the test proves nothing")
	}
	// Each request id wrote once, nothing half-applied.
	order := fullOrder(t, s, br)
	if len(order) != writers*each {
		t.Fatalf("%d messages after %d request ids (%d retried through the cut)", len(order), writers*each, n)
	}
	info, err := s.GetBranch(tctx(t), br)
	if err != nil || info.HeadSequence != uint64(1+writers*each) {
		t.Fatalf("head after the cut: %+v %v, want %d", info, err, 1+writers*each)
	}
	// A new subscription works again, from the cursor.
	listening(t, s)
	sub2, err := s.Subscribe(tctx(t), br, store.SubscribeInput{After: new(uint64)})
	if err != nil {
		t.Fatal(err)
	}
	defer sub2.Close()
	expectCommits(t, sub2, 0, info.HeadSequence, 5*time.Second)
	last := add(t, s, br, "after", store.WriteOptions{}).Head
	expectCommits(t, sub2, info.HeadSequence, last, 5*time.Second)
	t.Logf("%d of %d request ids retried through the cut", n, writers*each)
}
