package envelope

import (
	"errors"
	"testing"
)

// TestImageURL pins the image rules of ADR-0006 D2 ("Instruction image
// safety") and DESIGN.md (no network access; literal private addresses
// refused).
func TestImageURL(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"https://example.com/a.png", "https://example.com/a.png", true},
		{"http://example.com:8080/x?y=1", "http://example.com:8080/x?y=1", true},
		{"data:image/png;base64,iVBORw0KGgo=", "data:image/png;base64,iVBORw0KGgo=", true},
		{"data:image/jpg;base64,AAAA", "data:image/jpg;base64,AAAA", true},
		{"data:image/webp;base64,AAAA==", "data:image/webp;base64,AAAA==", true},
		{"iVBORw0KGgo=", "data:image/jpeg;base64,iVBORw0KGgo=", true},
		{"abc", "data:image/jpeg;base64,abc", true},
		{"data:image/svg+xml;base64,AAAA", "", false},
		{"data:text/html,hi", "", false},
		{"data:image/png;base64,", "", false},
		{"data:image/png;base64,AA AA", "", false},
		{"file:///etc/passwd", "", false},
		{"javascript:alert(1)", "", false},
		{"c:foo", "", false},
		{"ftp://example.com/a.png", "", false},
		{"http:///nohost", "", false},
		{"http://127.0.0.1/a.png", "", false},
		{"http://localhost/a.png", "", false},
		{"http://10.1.2.3/a.png", "", false},
		{"http://192.168.0.1/a.png", "", false},
		{"http://169.254.169.254/latest/meta-data", "", false},
		{"http://[::1]/a.png", "", false},
		{"http://[::ffff:127.0.0.1]/a.png", "", false},
		{"http://0.0.0.0/a.png", "", false},
		{"http://example.com/\x00", "", false},
	} {
		got, err := imageURL(tc.in)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("imageURL(%q) = %q, %v; want %q ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("imageURL(%q): error %v does not wrap ErrInvalid", tc.in, err)
		}
	}
}
