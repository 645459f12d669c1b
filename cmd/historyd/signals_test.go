package main

import (
	"context"
	"os"
	"syscall"
	"testing"
)

// TestRelaySignals: the first SIGINT or SIGTERM starts the shutdown (cancel), a second one forces
// it, and every SIGHUP asks for a reload, before and during the shutdown (issue 7: "a second signal
// stops at once"; "reloaded on SIGHUP without a restart").
func TestRelaySignals(t *testing.T) {
	for _, first := range []os.Signal{syscall.SIGTERM, os.Interrupt} {
		t.Run(first.String(), func(t *testing.T) {
			in := make(chan os.Signal)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sig, done, relayed := relaySignals(in, cancel)

			in <- syscall.SIGHUP
			<-sig.reload
			if ctx.Err() != nil {
				t.Fatal("SIGHUP cancelled the context")
			}
			in <- first
			<-ctx.Done()
			select {
			case <-sig.force:
				t.Fatal("the first stop signal forced the stop")
			default:
			}
			in <- syscall.SIGHUP
			<-sig.reload
			in <- syscall.SIGTERM
			<-sig.force
			close(done)
			<-relayed
		})
	}
}

// TestRelaySignalsFoldsReloads: SIGHUPs that arrive while a reload is pending are folded into it:
// the relay never blocks on a slow reader.
func TestRelaySignalsFoldsReloads(t *testing.T) {
	in := make(chan os.Signal)
	sig, done, relayed := relaySignals(in, func() {})
	for range 5 {
		in <- syscall.SIGHUP
	}
	<-sig.reload
	select {
	case <-sig.reload:
		t.Error("five SIGHUPs read by nobody made more than one pending reload")
	default:
	}
	close(done)
	<-relayed
}

// TestForceContext: the context ends when force closes, and cancel stops the watcher.
func TestForceContext(t *testing.T) {
	force := make(chan struct{})
	ctx, cancel := forceContext(force)
	close(force)
	<-ctx.Done()
	cancel()

	ctx, cancel = forceContext(nil) // the zero signals: never forced
	if ctx.Err() != nil {
		t.Fatal("context ended without force")
	}
	cancel()
	<-ctx.Done()
}
