package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// signals is what the serving process learns from its signals beyond the first stop request
// (which cancels run's context): SIGHUP asks for a reload of the tokens file and the TLS files; a
// second SIGINT or SIGTERM asks to stop at once instead of waiting out the grace period. The zero
// value never fires (tests that drive run through its context use it).
type signals struct {
	reload <-chan struct{} // receives one value per SIGHUP
	force  <-chan struct{} // closed on the second SIGINT or SIGTERM
}

// notifySignals starts relaying the process's SIGINT, SIGTERM and SIGHUP: the first SIGINT or
// SIGTERM cancels the returned context, a later one closes force, and each SIGHUP is a reload.
// stop stops the relay and waits for it.
func notifySignals() (context.Context, signals, func()) {
	in := make(chan os.Signal, 4)
	signal.Notify(in, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	ctx, cancel := context.WithCancel(context.Background())
	sig, done, relayed := relaySignals(in, cancel)
	return ctx, sig, func() {
		signal.Stop(in)
		close(done)
		<-relayed
		cancel()
	}
}

// relaySignals starts the goroutine that turns signals from in into cancel (first SIGINT or
// SIGTERM), force (later ones) and reload (SIGHUP). The goroutine is owned by the caller: it ends
// when done is closed, and closes relayed when it has.
func relaySignals(in <-chan os.Signal, cancel func()) (sig signals, done chan struct{}, relayed chan struct{}) {
	// A reload that arrives while one is pending is folded into it: one reread covers both.
	reload := make(chan struct{}, 1)
	force := make(chan struct{})
	done, relayed = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(relayed)
		stopping := false
		for {
			select {
			case <-done:
				return
			case s := <-in:
				switch {
				case s == syscall.SIGHUP:
					select {
					case reload <- struct{}{}:
					default:
					}
				case !stopping:
					stopping = true
					cancel()
				default:
					close(force)
					// Nothing is left to relay but reloads, which no longer matter.
					<-done
					return
				}
			}
		}
	}()
	return signals{reload: reload, force: force}, done, relayed
}

// forceContext returns a context for Shutdown that ends when force is closed: ending it cuts the
// grace period short. Its cancel stops the goroutine that watches force and waits for it.
func forceContext(force <-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	watched := make(chan struct{})
	go func() { // owned by the returned cancel, which ends and waits for it
		defer close(watched)
		select {
		case <-force:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, func() {
		cancel()
		<-watched
	}
}
