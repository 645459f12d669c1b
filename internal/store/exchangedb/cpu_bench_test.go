package exchangedb_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/cputime"
	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// The machine the benchmarks run on is shared, so wall-clock rates are noisy: the Send+Collect
// benchmarks also report the CPU an op costs, this process's (cpu-µs/op: the engine and the
// benchmark's own goroutines) and, on PostgreSQL, that of the server's backends serving the
// benchmark's connections (pg-cpu-µs/op, from /proc when the server runs on this machine).

// benchAppName tags the benchmark's PostgreSQL connections, so that their backends are found.
var benchAppName = fmt.Sprintf("historyd_bench_%d", os.Getpid())

// benchPGURL is a fresh schema's URL whose connections carry benchAppName.
func benchPGURL(b *testing.B) string {
	u, err := url.Parse(pgtest.New(b))
	if err != nil {
		b.Fatal(err)
	}
	v := u.Query()
	v.Set("application_name", benchAppName)
	u.RawQuery = strings.ReplaceAll(v.Encode(), "+", "%20")
	return u.String()
}

type cpuMeter struct {
	self time.Duration
	pg   map[int]time.Duration // backend pid -> CPU at the start; nil: not measured
}

// startCPU starts measuring; pg: the backends' CPU too (after benchPGURL).
func startCPU(b *testing.B, pg bool) *cpuMeter {
	m := &cpuMeter{self: cputime.Process()}
	if pg {
		m.pg = backendCPU(b)
	}
	return m
}

func (m *cpuMeter) report(b *testing.B) {
	n := float64(max(b.N, 1))
	b.ReportMetric(float64((cputime.Process()-m.self).Microseconds())/n, "cpu-µs/op")
	if m.pg == nil {
		return
	}
	end := backendCPU(b)
	if len(end) == 0 {
		return
	}
	var pg time.Duration
	for pid, t := range end {
		pg += t - m.pg[pid]
	}
	b.ReportMetric(float64(pg.Microseconds())/n, "pg-cpu-µs/op")
}

// backendCPU reads the CPU time of the backends serving benchAppName's connections (none when
// PostgreSQL is not reachable or its processes are not readable here).
func backendCPU(b *testing.B) map[int]time.Duration {
	out := map[int]time.Duration{}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.URL(b))
	if err != nil {
		return out
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, benchAppName)
	if err != nil {
		return out
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return out
	}
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(data)
		if !strings.Contains(s[:max(0, strings.LastIndexByte(s, ')'))], "(postgres") {
			continue // not a backend on this machine (a remote server's pid)
		}
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		out[int(pid)] = time.Duration(ut+st) * time.Second / 100 // clock ticks (USER_HZ 100)
	}
	return out
}
