package server

import (
	"context"
	"fmt"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// zapLogger adapts l to the go-grpc-middleware logging.Logger interface, which ships no zap
// adapter (docs/development.md#pinned-versions). Each call builds its own field list and writes one entry; l itself is
// never reassigned or extended, so fields of one call never leak into the next.
func zapLogger(l *zap.Logger) logging.Logger {
	l = l.WithOptions(zap.AddCallerSkip(1))
	return logging.LoggerFunc(func(_ context.Context, lvl logging.Level, msg string, fields ...any) {
		if lvl == logging.LevelInfo && isProbe(fields) {
			lvl = logging.LevelDebug // issue 19: a probe every few seconds is not news
		}
		ce := l.Check(zapLevel(lvl), msg)
		if ce == nil {
			return
		}
		zf := make([]zapcore.Field, 0, (len(fields)+1)/2)
		for i := 0; i < len(fields); i += 2 {
			key, ok := fields[i].(string)
			if !ok {
				key = fmt.Sprint(fields[i])
			}
			var val any = ""
			if i+1 < len(fields) {
				val = fields[i+1]
			}
			zf = append(zf, zap.Any(key, val))
		}
		ce.Write(zf...)
	})
}

// isProbe reports whether a call's fields are those of grpc.health.v1.Health/Check, what load
// balancers, Kubernetes and `historyd healthcheck` call every few seconds.
func isProbe(fields []any) bool {
	var service, method bool
	for i := 0; i+1 < len(fields); i += 2 {
		switch fields[i] {
		case "grpc.service":
			service = fields[i+1] == healthService
		case "grpc.method":
			method = fields[i+1] == "Check"
		}
	}
	return service && method
}

// zapLevel maps a middleware (slog-style) level to the zap level at or below it.
func zapLevel(lvl logging.Level) zapcore.Level {
	switch {
	case lvl >= logging.LevelError:
		return zapcore.ErrorLevel
	case lvl >= logging.LevelWarn:
		return zapcore.WarnLevel
	case lvl >= logging.LevelInfo:
		return zapcore.InfoLevel
	default:
		return zapcore.DebugLevel
	}
}
