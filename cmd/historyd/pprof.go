package main

import (
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"go.uber.org/zap"
)

// pprofSetting is --pprof-addr: Go's profiling endpoints, off by default. cmd/historybench turns it
// on to take a CPU profile of the server while it measures (docs/performance.md). init appends it
// to settings, so it gets the environment fallback, the usage line and the README row.
var pprofSetting = setting{"pprof-addr", "HISTORYD_PPROF_ADDR", "",
	"host:port to serve Go's pprof profiles on, at /debug/pprof/, over plain HTTP with no authentication: bind it to loopback (empty = off)"}

func init() { settings = append(settings, pprofSetting) }

// registerPprof defines --pprof-addr on fs.
func registerPprof(fs *flag.FlagSet, addr *string) {
	fs.StringVar(addr, pprofSetting.flag, pprofSetting.def, pprofSetting.usage)
}

// validatePprof checks --pprof-addr: empty, or host:port.
func validatePprof(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("pprof address %q: %v", addr, err)
	}
	return nil
}

// Timeouts of the pprof listener: a CPU profile streams for its `seconds` parameter (30 by default)
// before it writes, so a write may take that long and more.
const (
	pprofReadHeaderTimeout = 5 * time.Second
	pprofWriteTimeout      = 5 * time.Minute
)

// startPprof listens on addr and serves the net/http/pprof handlers (on a mux of their own, never
// http.DefaultServeMux) until close, which cuts a profile in progress.
func startPprof(addr string, logger *zap.Logger) (*httpListener, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, goroutine, allocs, ... by name
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return listenHTTP(addr, &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: pprofReadHeaderTimeout,
		WriteTimeout:      pprofWriteTimeout,
		ErrorLog:          zap.NewStdLog(logger.Named("pprof")),
	})
}

// servePprof starts the pprof listener when addr is set and returns its stop function (a no-op
// when it is off).
func servePprof(addr string, logger *zap.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ps, err := startPprof(addr, logger)
	if err != nil {
		return nil, err
	}
	logger.Info("serving pprof", zap.String("address", ps.addr()))
	return func() { _ = ps.close() }, nil
}
