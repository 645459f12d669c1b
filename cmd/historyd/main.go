package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/server"
	"github.com/historyd/historyd/internal/store"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole process: it serves until ctx ends (SIGINT or SIGTERM in production), then
// shuts down, and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) int {
	cfg, err := parseConfig(args, getenv)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stderr, usage())
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "historyd: %v\n%s", err, usage())
		return 2
	}
	logger, err := newLogger(cfg.LogLevel, cfg.LogFormat, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "historyd: %v\n%s", err, usage())
		return 2
	}
	defer func() { _ = logger.Sync() }() // stderr may not support fsync; nothing to do about it

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		logger.Error("cannot listen on "+cfg.Listen, zap.String("address", cfg.Listen), zap.Error(err))
		return 1
	}

	srv := server.New(logger, server.WithGracePeriod(cfg.GracePeriod))
	ex := exchange.New(cfg.Exchange.options(logger)...)
	defer ex.Close() // after Shutdown: stops the background collector, if any
	server.RegisterExchange(srv, ex, cfg.Exchange.streamOptions()...)
	server.RegisterHistory(srv, store.NewMemory(cfg.History.options()...))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }() // ends when Shutdown stops the server

	logger.Info("serving",
		zap.String("address", lis.Addr().String()),
		zap.String("version", version),
		zap.Duration("grace_period", cfg.GracePeriod))

	select {
	case <-ctx.Done():
		logger.Info("shutting down", zap.Duration("grace_period", cfg.GracePeriod))
		if err := srv.Shutdown(context.Background()); err != nil {
			logger.Warn("shutdown cut open RPCs off", zap.Error(err))
		}
		if err := <-served; err != nil {
			logger.Error("serving failed", zap.Error(err))
			return 1
		}
		logger.Info("stopped")
		return 0
	case err := <-served:
		logger.Error("serving failed", zap.String("address", lis.Addr().String()), zap.Error(err))
		_ = srv.Shutdown(context.Background())
		return 1
	}
}
