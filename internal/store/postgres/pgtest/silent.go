package pgtest

import (
	"net"
	"sync"
	"testing"
)

// SilentServer accepts TCP connections and never answers them, as a port that is not PostgreSQL
// (or a PostgreSQL stuck before its startup reply) does: what a bounded connect must give up on.
// It returns its address and a channel that receives once a connection has been accepted; the
// connections and the listener close when the test ends.
func SilentServer(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	acc := make(chan struct{}, 1)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() { // owned by the test: ends when Cleanup closes lis
		defer close(done)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			select {
			case acc <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return lis.Addr().String(), acc
}
