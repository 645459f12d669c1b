package exchange

import (
	"sync"

	"github.com/google/uuid"
)

// collector is the optional background collection loop, LionAGI's Exchange.run: it collects the
// owners that sent since its last pass. It is owned by the Exchange: started by New, ended and
// waited for by Close.
type collector struct {
	x    *Exchange
	mu   sync.Mutex
	dirt map[uuid.UUID]struct{} // owners with messages queued since the last pass
	kick chan struct{}          // capacity 1: a pending pass; more kicks coalesce into it
	quit chan struct{}
	done chan struct{}
}

func startCollector(x *Exchange) *collector {
	c := &collector{
		x:    x,
		dirt: map[uuid.UUID]struct{}{},
		kick: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	go c.run()
	return c
}

// note records that owner queued a message and wakes the loop.
func (c *collector) note(owner uuid.UUID) {
	c.mu.Lock()
	c.dirt[owner] = struct{}{}
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default: // a pass is pending already and will see owner
	}
}

func (c *collector) run() {
	defer close(c.done)
	for {
		select {
		case <-c.quit:
			return
		case <-c.kick:
			c.pass()
		}
	}
}

// pass collects the dirty owners in registration order. A panic in a pass is contained so that
// the loop keeps running and the panic goes to the WithPanicHandler function; the messages of that
// pass stay wherever Collect left them.
func (c *collector) pass() {
	defer func() {
		if p := recover(); p != nil && c.x.opts.onPanic != nil {
			c.x.opts.onPanic(p)
		}
	}()
	c.mu.Lock()
	dirt := c.dirt
	c.dirt = map[uuid.UUID]struct{}{}
	c.mu.Unlock()
	for _, f := range c.x.registered() {
		if _, ok := dirt[f.owner]; ok {
			_, _ = c.x.Collect(f.owner) // an owner unregistered meanwhile has nothing to collect
		}
	}
}

// stop ends the loop and waits for it.
func (c *collector) stop() {
	close(c.quit)
	<-c.done
}
