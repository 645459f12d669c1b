package main

import (
	"flag"
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
	"host:port to serve Go's pprof profiles on, at /debug/pprof/ (all but cmdline, which can hold secrets), over plain HTTP with no authentication: bind it to loopback, else a warning is logged (empty = off)"}

func init() { settings = append(settings, pprofSetting) }

// registerPprof defines --pprof-addr on fs.
func registerPprof(fs *flag.FlagSet, addr *string) {
	fs.StringVar(addr, pprofSetting.flag, pprofSetting.def, pprofSetting.usage)
}

// validatePprof checks --pprof-addr with the other settings, before anything opens: empty, or
// host:port with a port from 0 to 65535, as --listen and --metrics-addr (a port out of range
// exited 1 once the store had been opened, where the README promises 2).
func validatePprof(addr string) error {
	if addr == "" {
		return nil
	}
	return validateAddr(pprofSetting.flag, addr, "127.0.0.1:6060")
}

// Timeouts of the pprof listener: a CPU profile streams for its `seconds` parameter (30 by default)
// before it writes, so a write may take that long and more.
const (
	pprofReadHeaderTimeout = 5 * time.Second
	pprofWriteTimeout      = 5 * time.Minute
)

// startPprof listens on addr and serves the net/http/pprof handlers (on a mux of their own, never
// http.DefaultServeMux) until close, which cuts a profile in progress. All but the command line:
// /debug/pprof/cmdline answered historyd's arguments, --postgres-url's password included, to
// anyone who reached the listener, which has no authentication; the start log line already says
// how historyd is configured, without secrets.
func startPprof(addr string, logger *zap.Logger) (*httpListener, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, goroutine, allocs, ... by name
	mux.HandleFunc("/debug/pprof/cmdline", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "historyd does not serve its command line: it can hold secrets (--postgres-url's password); its \"serving\" log line shows its configuration", http.StatusNotFound)
	})
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
	if tcp, ok := ps.lis.Addr().(*net.TCPAddr); !ok || !tcp.IP.IsLoopback() {
		// As the gRPC listener warns when it serves beyond loopback without authentication: the
		// profiles show the process's memory and stacks, and a CPU profile costs it CPU.
		logger.Warn("serving pprof beyond loopback, over plain HTTP with no authentication: any client that reaches this "+
			"address can read heap and goroutine profiles and run CPU profiles and traces; bind --pprof-addr to 127.0.0.1",
			zap.String("address", ps.addr()))
	}
	return func() { _ = ps.close() }, nil
}
