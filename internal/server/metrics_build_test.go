package server

import (
	"io"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestBuildInfoMetric: historyd_build_info{version,commit,go_version} is 1 (issue 19).
func TestBuildInfoMetric(t *testing.T) {
	m := NewMetrics()
	m.SetBuildInfo("v1.2.3", "abc123", "go1.26.8")
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	want := `historyd_build_info{commit="abc123",go_version="go1.26.8",version="v1.2.3"} 1`
	if !strings.Contains(string(body), want+"\n") {
		t.Errorf("metrics lack %q", want)
	}
}
