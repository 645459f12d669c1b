package envelope

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"
	"unicode"
)

// imageURL checks one instruction image and returns the URL it renders as
// (ADR-0006 D2 "Instruction image safety", DESIGN.md): http(s) URLs with a
// host and no null bytes whose host is not a literal loopback, private or
// link-local address; data: URIs only for non-empty base64 PNG, JPEG, GIF
// or WebP; other schemes rejected; anything else taken as raw base64 and
// wrapped as a JPEG data URI. No network access: DNS names are not
// resolved (LionAGI 0.27 resolves them at render time).
func imageURL(img string) (string, error) {
	switch {
	case strings.HasPrefix(img, "http://") || strings.HasPrefix(img, "https://"):
		if err := checkHTTPImageURL(img); err != nil {
			return "", err
		}
		return img, nil
	case strings.HasPrefix(img, "data:"):
		if !validDataImage(img) {
			return "", fieldErr("", "Rejected data: URI — only data:image/*;base64,… is allowed. Got: %s", pyTruncRepr(img, 80))
		}
		return img, nil
	case strings.Contains(img, "://") || looksLikeScheme(img):
		scheme := img
		if i := strings.Index(img, ":"); i >= 0 {
			scheme = img[:i]
		}
		return "", fieldErr("", "Image URL must use http:// or https:// scheme, got: %s://", strings.ToLower(scheme))
	}
	return "data:image/jpeg;base64," + img, nil
}

// looksLikeScheme is LionAGI's `idx.split(":")[0].isalpha() and ":" in idx`.
func looksLikeScheme(s string) bool {
	head, _, found := strings.Cut(s, ":")
	if !found || head == "" {
		return false
	}
	for _, r := range head {
		if !isAlpha(r) {
			return false
		}
	}
	return true
}

// isAlpha is Python's str.isalpha for one character.
func isAlpha(r rune) bool { return unicode.IsLetter(r) }

func checkHTTPImageURL(raw string) error {
	if strings.ContainsRune(raw, 0) {
		return fieldErr("", "Image URL contains a null byte")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fieldErr("", "Image URL is malformed: %v", err)
	}
	host := u.Hostname()
	if host == "" {
		return fieldErr("", "Image URL has no host: %s", pyTruncRepr(raw, 80))
	}
	if isBlockedHost(host) {
		return fieldErr("", "Image URL host '%s' is not allowed: it is a private, loopback, or link-local address (SSRF risk)", host)
	}
	return nil
}

// isBlockedHost reports hosts that name this machine or a private network
// without DNS: "localhost" and literal loopback, private, link-local,
// unspecified and multicast addresses (IPv4-mapped IPv6 included).
func isBlockedHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	addr, err := netip.ParseAddr(strings.Trim(h, "[]"))
	if err != nil {
		return false
	}
	addr = addr.Unmap()
	return addr.IsLoopback() || addr.IsPrivate() || addr.IsLinkLocalUnicast() ||
		addr.IsLinkLocalMulticast() || addr.IsUnspecified() || addr.IsMulticast() ||
		addr.IsInterfaceLocalMulticast()
}

// validDataImage is LionAGI's ^data:image/(?:png|jpe?g|gif|webp);base64,[A-Za-z0-9+/]+=*$
func validDataImage(s string) bool {
	rest, ok := strings.CutPrefix(s, "data:image/")
	if !ok {
		return false
	}
	matched := false
	for _, t := range [...]string{"png", "jpeg", "jpg", "gif", "webp"} {
		if r, ok := strings.CutPrefix(rest, t+";base64,"); ok {
			rest, matched = r, true
			break
		}
	}
	if !matched {
		return false
	}
	i := 0
	for i < len(rest) && isBase64Char(rest[i]) {
		i++
	}
	if i == 0 {
		return false
	}
	for i < len(rest) && rest[i] == '=' {
		i++
	}
	// Python's $ also matches before one trailing newline.
	return i == len(rest) || (i == len(rest)-1 && rest[i] == '\n')
}

func isBase64Char(c byte) bool {
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' || c == '/'
}

// pyTruncRepr shortens s to n characters for an error message, quoted.
func pyTruncRepr(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		r = r[:n]
	}
	return fmt.Sprintf("%q", string(r))
}
