package envelope

import (
	"errors"
	"testing"
)

// TestImageURL pins the image rules of ADR-0006 D2 ("Instruction image
// safety") and docs/design.md#images (no network access; literal private addresses
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
		// issue 13 item 3: LionAGI 0.27's validate_image_url and is_ssrf_safe (commit 669ea9b5,
		// lionagi/protocols/messages/validators.py, lionagi/ln/_ssrf.py), without name resolution.
		{"http://example.com/a%00.png", "", false},
		{"http://example.com/a%00", "", false},
		{"HTTPS://example.com/x.png", "HTTPS://example.com/x.png", true},
		{"Http://example.com/x.png", "Http://example.com/x.png", true},
		{"HTTP://127.0.0.1/x.png", "", false},
		{"http://2130706433/a.png", "", false},
		{"http://0x7f000001/a.png", "", false},
		{"http://127.1/a.png", "", false},
		{"http://0177.0.0.1/a.png", "", false},
		{"http://10.1/a.png", "", false},
		{"http://100.64.0.1/a.png", "", false},
		{"http://100.127.255.255/a.png", "", false},
		{"http://100.128.0.1/a.png", "http://100.128.0.1/a.png", true},
		{"http://172.31.0.1/a.png", "", false},
		{"http://172.32.0.1/a.png", "http://172.32.0.1/a.png", true},
		{"http://[::127.0.0.1]/a.png", "", false},
		{"http://[fe80::1%25eth0]/a.png", "", false},
		{"http://[fd00::1]/a.png", "", false},
		{"http://[ff02::1]/a.png", "", false},
		{"http://[::]/a.png", "", false},
		{"http://[2001:db8::1]/a.png", "http://[2001:db8::1]/a.png", true},
		{"http://224.0.0.1/a.png", "http://224.0.0.1/a.png", true}, // not in _BLOCKED_NETS
		{"http://1.2.3.4/a.png", "http://1.2.3.4/a.png", true},
		{"http://4294967296/a.png", "http://4294967296/a.png", true}, // not an address: a name, not resolved
		{"http://example.com/a.png", "http://example.com/a.png", true},
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
