package exchange

import (
	"slices"
	"sync"
)

// collector is the optional background collection loop, LionAGI's Exchange.run: it collects the
// owners that sent since its last pass. It is owned by the Exchange: started by New, ended and
// waited for by Close.
//
// A pass costs O(d log d) for d owners that sent since the last one, whatever the number of
// registered owners. Sends tell the collector through the flow's dirty flag: only the Send that
// sets it takes the collector's lock, and never while holding the flow's lock.
type collector struct {
	x    *Exchange
	mu   sync.Mutex
	dirt []*flow       // flows whose dirty flag was set since the last pass
	kick chan struct{} // capacity 1: a pending pass; more kicks coalesce into it
	quit chan struct{}
	done chan struct{}
}

func startCollector(x *Exchange) *collector {
	c := &collector{
		x:    x,
		kick: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	go c.run()
	return c
}

// note records that fs, whose dirty flags are set, have messages queued, and wakes the loop.
func (c *collector) note(fs ...*flow) {
	c.mu.Lock()
	c.dirt = append(c.dirt, fs...)
	c.mu.Unlock()
	select {
	case c.kick <- struct{}{}:
	default: // a pass is pending already and will see fs
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

// pass collects the dirty flows in registration order. Each flow's dirty flag is cleared before
// its collect, so a Send during the collect marks it again for the next pass. A panic in a pass is
// contained so that the loop keeps running and the panic goes to the WithPanicHandler function;
// the messages of that pass stay wherever Collect left them, and the owners not yet collected are
// taken again by the next pass.
func (c *collector) pass() {
	c.mu.Lock()
	dirt := c.dirt
	c.dirt = nil
	c.mu.Unlock()
	slices.SortFunc(dirt, func(a, b *flow) int { return cmpUint(a.regSeq, b.regSeq) })
	for i, f := range dirt {
		if !c.collect(f) {
			c.note(dirt[i+1:]...) // their flags are still set: no Send will note them
			return
		}
	}
}

// collect collects f, recovering from a panic; false after a panic.
func (c *collector) collect(f *flow) (ok bool) {
	defer func() {
		if p := recover(); p != nil {
			ok = false
			if c.x.opts.onPanic != nil {
				c.x.opts.onPanic(p)
			}
		}
	}()
	f.dirty.Store(false)
	_, _ = c.x.collect(f, ReportOptions{}) // an owner unregistered meanwhile has nothing to collect
	return true
}

// stop ends the loop and waits for it.
func (c *collector) stop() {
	close(c.quit)
	<-c.done
}
