package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
)

// TestCountMaxima: the counts historyd allocates for up front, per process or per stream, have a
// documented maximum; a larger value is refused at start with one line naming the flag and the
// range, exit 2. --stream-workers 4294967295 was accepted and the process died of OOM with a
// goroutine dump; the buffers and the append window are allocated whole by each stream.
func TestCountMaxima(t *testing.T) {
	for _, tc := range []struct {
		flag, env string
		max       int
	}{
		{"stream-workers", "HISTORYD_STREAM_WORKERS", maxStreamWorkers},
		{"watch-buffer", "HISTORYD_WATCH_BUFFER", maxWatchBuffer},
		{"exchange-subscriber-buffer", "HISTORYD_EXCHANGE_SUBSCRIBER_BUFFER", maxExchangeSubscriberBuffer},
		{"append-max-window", "HISTORYD_APPEND_MAX_WINDOW", maxAppendWindow},
	} {
		// The maximum is accepted.
		if _, err := parseConfig([]string{"--" + tc.flag, strconv.Itoa(tc.max)}, envOf(nil)); err != nil {
			t.Errorf("--%s %d (the maximum) = %v, want it accepted", tc.flag, tc.max, err)
		}
		for _, v := range []string{strconv.Itoa(tc.max + 1), "4294967295", "9223372036854775807"} {
			for _, given := range []struct {
				args []string
				env  map[string]string
			}{{args: []string{"--" + tc.flag, v}}, {env: map[string]string{tc.env: v}}} {
				var stdout, stderr strings.Builder
				// A context already ended: were the value accepted, the server would stop at once.
				ctx, cancel := context.WithCancel(context.Background())
				cancel()
				env := map[string]string{"HISTORYD_STORE": "memory", "HISTORYD_LISTEN": "127.0.0.1:0"}
				for k, x := range given.env {
					env[k] = x
				}
				code := runIO(ctx, signals{}, given.args, envOf(env), &stdout, &stderr)
				lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
				if code != 2 || len(lines) != 1 || !strings.Contains(lines[0], "--"+tc.flag) || !strings.Contains(lines[0], strconv.Itoa(tc.max)) {
					t.Errorf("%s=%s (from the environment: %v) = %d, %q; want 2 and one line naming --%s and its maximum %d", tc.flag, v, given.args == nil, code, stderr.String(), tc.flag, tc.max)
				}
			}
		}
	}
}
