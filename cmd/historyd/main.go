package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strings"

	"go.uber.org/zap"

	"github.com/historyd/historyd/internal/server"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, sig, stop := notifySignals() // signals.go
	code := runIO(ctx, sig, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole process: it serves until ctx ends (SIGINT or SIGTERM in production), then
// shuts down, and returns the exit code. `historyd healthcheck ...` runs the health check instead
// (healthcheck.go).
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	return runWithSignals(ctx, signals{}, args, getenv, stderr)
}

// runWithSignals is run that also reloads credentials on SIGHUP and stops at once on a second stop
// signal (signals.go).
func runWithSignals(ctx context.Context, sig signals, args []string, getenv func(string) string, stderr io.Writer) int {
	return runIO(ctx, sig, args, getenv, os.Stdout, stderr)
}

// runIO is runWithSignals with the standard output named: help and version go there (so that
// `historyd --help | less` works), logs and usage errors to stderr.
func runIO(ctx context.Context, sig signals, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "healthcheck":
			return healthcheck(ctx, args[1:], getenv, stdout, stderr)
		case "migrate":
			return migrate(ctx, args[1:], getenv, stdout, stderr) // migrate.go
		case "backup":
			return backup(ctx, args[1:], getenv, stdout, stderr) // backup.go
		case "version", "--version", "-version":
			if len(args) > 1 {
				fmt.Fprintf(stderr, "historyd: version takes no arguments, got %q\n", args[1:])
				return 2
			}
			printVersion(stdout)
			return 0
		case "help":
			fmt.Fprint(stdout, usage())
			return 0
		case "serve":
			args = args[1:]
		}
	}
	cfg, err := parseConfig(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage())
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "historyd: %v (historyd --help lists the flags)\n", strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return 2
	}
	logger, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "historyd: %v (historyd --help lists the flags)\n", err)
		return 2
	}
	defer func() { _ = logger.Sync() }() // stderr may not support fsync; nothing to do about it
	// The collector's GOGC (gc.go); parseConfig has validated the value.
	if err := applyGC(cfg.GCPercent, cfg.Store.Engine, getenv); err != nil {
		logger.Error("cannot set the collector's GOGC", zap.Error(err))
		return 2
	}
	// The runtime's soft memory limit (memlimit.go); parseConfig has validated the value.
	if err := applyMemoryLimit(cfg, getenv); err != nil {
		logger.Error("cannot set the runtime's memory limit", zap.Error(err))
		return 2
	}

	creds, err := loadCredentials(cfg.Serving) // serving.go
	if err != nil {
		logger.Error("cannot load credentials", zap.Error(err))
		return 1
	}

	// The store before the listener: a data directory another historyd holds, or a schema this one
	// cannot serve, is refused before anything listens (issue 14).
	branches, err := openEngine(ctx, cfg, logger) // engine.go
	if err != nil {
		// SIGINT or SIGTERM while the store opened (connecting, migrating, waiting for the
		// migration lock) cancels the open: a stop asked for, exit 0 as documented, not a failure
		// to start. Any other error is one, even with a signal under way.
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			logger.Info(stoppedBeforeServing, cfg.Store.logFields()...)
			return 0
		}
		logger.Error(err.Error(), cfg.Store.logFields()...)
		return 1
	}
	if ctx.Err() != nil { // the signal came as the open finished: nothing has listened yet
		if err := branches.close(); err != nil {
			logger.Error("closing the store", zap.String("store", branches.name), zap.Error(err))
		}
		logger.Info(stoppedBeforeServing, branches.logFields()...)
		return 0
	}
	if branches.warning != "" {
		logger.Warn(branches.warning, cfg.Store.logFields()...)
	}
	// Deferred first, so it runs last: after the server has shut down and the metrics have stopped
	// reading the store's stats.
	defer func() {
		if err := branches.close(); err != nil {
			logger.Error("closing the store", zap.String("store", branches.name), zap.Error(err))
		}
	}()

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		logger.Error("cannot listen on "+cfg.Listen, zap.String("address", cfg.Listen), zap.Error(err))
		return 1
	}

	build := currentBuild()
	var metrics *server.Metrics // nil: --metrics-addr is off
	if cfg.Serving.MetricsAddr != "" {
		metrics = server.NewMetrics()
		metrics.SetBuildInfo(build.Version, build.Commit, build.GoVersion)
	}
	srv := server.New(logger, append(creds.options(), server.WithGracePeriod(cfg.GracePeriod),
		server.WithLimits(cfg.Serving.Limits), server.WithMetrics(metrics))...)
	ex := branches.newExchange(cfg.Exchange.options(logger)) // engine.go: in the store's database but for memory
	defer func() { _ = ex.Close() }()                        // after Shutdown, before the store closes: stops the background collector, if any
	registerServices(srv, branches, ex, cfg)                 // services.go
	if metrics != nil {
		ms, err := startMetrics(cfg.Serving.MetricsAddr, metrics, branches, ex, logger)
		if err != nil {
			lis.Close()
			logger.Error("cannot listen on "+cfg.Serving.MetricsAddr+" for metrics",
				zap.String("address", cfg.Serving.MetricsAddr), zap.Error(err))
			return 1
		}
		defer stopMetrics(ms) // after the gRPC server has stopped
		logger.Info("serving metrics", zap.String("address", ms.addr()))
	}
	stopPprof, err := servePprof(cfg.PprofAddr, logger) // pprof.go; off by default
	if err != nil {
		lis.Close()
		logger.Error("cannot listen on "+cfg.PprofAddr+" for pprof", zap.String("address", cfg.PprofAddr), zap.Error(err))
		return 1
	}
	defer stopPprof()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }() // ends when Shutdown stops the server

	logger.Info("serving", append([]zap.Field{
		zap.String("address", lis.Addr().String()),
		zap.String("version", build.Version), zap.String("commit", build.Commit), zap.String("go_version", build.GoVersion),
		zap.Duration("grace_period", cfg.GracePeriod), zap.Int64("memory_limit", debug.SetMemoryLimit(-1))},
		append(branches.logFields(), creds.logFields()...)...)...)
	if creds.openToAnyone(lis.Addr()) {
		logger.Warn("serving without client authentication beyond loopback: any client that reaches this "+
			"address can read and change every history; set --auth-tokens-file or --tls-client-ca",
			zap.String("address", lis.Addr().String()))
	}

	if err := awaitStop(ctx, sig, served, creds, logger); err != nil { // serving.go
		logger.Error("serving failed", zap.String("address", lis.Addr().String()), zap.Error(err))
		_ = srv.Shutdown(context.Background())
		return 1
	}
	logger.Info("shutting down", zap.Duration("grace_period", cfg.GracePeriod))
	shutdownCtx, cancel := forceContext(sig.force) // a second signal cuts the grace period short
	err = srv.Shutdown(shutdownCtx)
	cancel()
	if err != nil {
		logger.Warn("shutdown cut open RPCs off", zap.Error(err))
	}
	if err := <-served; err != nil {
		logger.Error("serving failed", zap.Error(err))
		return 1
	}
	logger.Info("stopped")
	return 0
}

// stoppedBeforeServing is the line of a stop signal that came while the store was opening: a stop
// asked for, exit 0, not a failure to start.
const stoppedBeforeServing = "stopped before serving: a stop signal came while the store was opening"
