package client_test

import (
	"io"
	"strings"
	"testing"
	"time"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/server"
)

// pausingReader gives its text only after a pause, as a pipe from a slow source does.
type pausingReader struct {
	pause <-chan time.Time
	r     io.Reader
}

func (p *pausingReader) Read(b []byte) (int, error) {
	<-p.pause // the first Read waits out the pause; later ones find closedTime
	p.pause = closedTime
	return p.r.Read(b)
}

var closedTime = func() <-chan time.Time { c := make(chan time.Time); close(c); return c }()

// TestImportBranchReaderSlowSource: the server ends a stream whose first message has not come
// within --request-body-timeout (the slowloris review); ImportBranchReader sends its options before
// it reads the payload, so a source slower than that (here, one that gives nothing for three body
// timeouts) still imports.
func TestImportBranchReaderSlowSource(t *testing.T) {
	const body = 200 * time.Millisecond
	l := server.DefaultLimits()
	l.RequestBodyTimeout = body
	c := dial(t, startServerWith(t, []server.Option{server.WithLimits(l)}))
	data := `{"id":"00000000-0000-4000-8000-000000000001","messages":[]}`
	resp, err := c.ImportBranchReader(testContext(t), &historyv1.ImportBranchStreamRequest{NewBranchId: true},
		&pausingReader{pause: time.After(3 * body), r: strings.NewReader(data)}) // an observation window, not a synchronisation
	if err != nil {
		t.Fatalf("an import from a source slower than the body timeout: %v", err)
	}
	if resp.GetBranch().GetId() == "" {
		t.Fatalf("import answered %v, want the new branch", resp)
	}
}
