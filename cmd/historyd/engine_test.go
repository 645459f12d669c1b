package main

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/historyd/historyd/internal/envelope/jsonv"
	"github.com/historyd/historyd/internal/store"
)

// Review of issue 15, defect 6: a --max-db-bytes below the database's size is clamped by SQLite
// (max_page_count cannot go below the page count), so the database cannot grow at all; the start
// warns naming both sizes rather than leave every growing write to fail unexplained.
func TestMaxDBBytesBelowTheDatabaseWarns(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := config{Store: storeConfig{Engine: storeSQLite, DataDir: t.TempDir(), Sync: "normal", AutoMigrate: true,
		SQLiteCache: 1 << 20, SQLiteReaders: 1}}
	open := func() *engine {
		t.Helper()
		e, err := openEngine(ctx, c, zap.NewNop())
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	e := open()
	if e.warning != "" {
		t.Fatalf("no limit, yet the start warns: %s", e.warning)
	}
	if _, err := e.CreateBranch(ctx, store.CreateBranchInput{System: jsonv.StringValue(strings.Repeat("s", 2<<20))}); err != nil {
		t.Fatal(err)
	}
	if err := e.close(); err != nil {
		t.Fatal(err)
	}

	c.Store.MaxDBBytes = 1 << 20
	e = open()
	defer func() { _ = e.close() }()
	w := e.warning
	m := regexp.MustCompile(` is (\d+) bytes, over --max-db-bytes=(\d+)`).FindStringSubmatch(w)
	if !strings.Contains(w, e.file) || m == nil || m[2] != strconv.Itoa(1<<20) {
		t.Fatalf("warning %q does not name the file, its size and the limit", w)
	}
	if size, _ := strconv.Atoi(m[1]); size < 2<<20 {
		t.Fatalf("warning %q: the size is not the database's", w)
	}
}
