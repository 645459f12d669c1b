package envelope

import (
	"fmt"
	"net/netip"
	"strings"
	"unicode"

	"golang.org/x/text/unicode/norm"
)

// imageURL checks one instruction image and returns the URL it renders as
// (ADR-0006 D2 "Instruction image safety", docs/design.md#images), as LionAGI 0.27's
// Instruction._format_image_item and validate_image_url do (commit
// 669ea9b5): http(s) URLs (the scheme compared lowercased) with a host, no
// null byte, no "%00", and a host that is not a blocked address in any form
// the C resolver reads; data: URIs only for non-empty base64 PNG, JPEG, GIF
// or WebP; other schemes rejected; anything else taken as raw base64 and
// wrapped as a JPEG data URI. No network access: DNS names are not resolved
// (LionAGI resolves them and refuses those that resolve to a blocked range
// or do not resolve; docs/decisions/0012).
func imageURL(img string) (string, error) {
	switch {
	case strings.HasPrefix(img, "http://") || strings.HasPrefix(img, "https://"):
		if err := validateImageURL(img); err != nil {
			return "", err
		}
		return img, nil
	case strings.HasPrefix(img, "data:"):
		if !validDataImage(img) {
			return "", fieldErr("", "Rejected data: URI — only data:image/*;base64,… is allowed. Got: %s", pyTruncRepr(img, 80))
		}
		return img, nil
	case strings.Contains(img, "://") || looksLikeScheme(img):
		// validate_image_url refuses every scheme but http and https, which
		// it compares lowercased: "HTTPS://host/x.png" passes (issue 13 item 3).
		if err := validateImageURL(img); err != nil {
			return "", err
		}
		return img, nil
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

// validateImageURL is validate_image_url (lionagi/protocols/messages/
// validators.py, 669ea9b5) without name resolution, its checks in its order
// and with its texts: null bytes, urlparse (which raises only for bad
// brackets and for NFKC delimiters), the scheme, a netloc, then the hostname
// against the blocked ranges. Nothing else about the URL is checked (not
// percent escapes, ports or the path), and the URL is sent as given.
func validateImageURL(raw string) error {
	if strings.ContainsRune(raw, 0) {
		return fieldErr("", "Image URL contains null byte - potential path truncation attack")
	}
	if strings.Contains(strings.ToLower(raw), "%00") {
		return fieldErr("", "Image URL contains percent-encoded null byte (%%00) - potential path truncation attack")
	}
	scheme, netloc, malformed := pyURLSplit(raw)
	if malformed != "" {
		return fieldErr("", "Malformed image URL '%s': %s", raw, malformed)
	}
	if scheme != "http" && scheme != "https" {
		return fieldErr("", "Image URL must use http:// or https:// scheme, got: %s://", scheme)
	}
	if netloc == "" {
		return fieldErr("", "Image URL missing domain: %s", raw)
	}
	host := pyHostname(netloc)
	if host == "" {
		return fieldErr("", "Image URL host None is not allowed: it resolves to a private, loopback, or link-local address (SSRF risk), or could not be resolved.")
	}
	if isBlockedHost(host) {
		return fieldErr("", "Image URL host '%s' is not allowed: it resolves to a private, loopback, or link-local address (SSRF risk), or could not be resolved.", host)
	}
	return nil
}

// pyURLSplit is urllib.parse.urlsplit of Python 3.11.7 as far as
// validate_image_url reads it: the scheme (lowercased) and the netloc, or
// the text of the ValueError urlsplit raises (malformed).
func pyURLSplit(raw string) (scheme, netloc, malformed string) {
	// Leading C0 controls and spaces are stripped; tabs and newlines
	// anywhere are removed.
	url := strings.TrimLeftFunc(raw, func(r rune) bool { return r <= ' ' })
	url = strings.NewReplacer("\t", "", "\r", "", "\n", "").Replace(url)
	if i := strings.IndexByte(url, ':'); i > 0 && isASCIILetter(url[0]) && allSchemeChars(url[:i]) {
		scheme, url = strings.ToLower(url[:i]), url[i+1:]
	}
	if rest, ok := strings.CutPrefix(url, "//"); ok {
		if end := strings.IndexAny(rest, "/?#"); end >= 0 {
			rest = rest[:end]
		}
		netloc = rest
		open, closed := strings.Contains(netloc, "["), strings.Contains(netloc, "]")
		if open != closed {
			return "", "", "Invalid IPv6 URL"
		}
		if open {
			_, after, _ := strings.Cut(netloc, "[")
			host, _, _ := strings.Cut(after, "]")
			if bad := checkBracketedHost(host); bad != "" {
				return "", "", bad
			}
		}
	}
	if bad := checkNetloc(netloc); bad != "" {
		return "", "", bad
	}
	return scheme, netloc, ""
}

func isASCIILetter(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') }

// allSchemeChars reports whether s holds only urllib's scheme_chars: ASCII
// letters, digits, "+", "-" and ".".
func allSchemeChars(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isASCIILetter(c) && (c < '0' || c > '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

// checkBracketedHost is urllib's _check_bracketed_host: an IPvFuture
// (v<hex>.<more>), or an IPv6 address, with a zone or not; for an IPv4
// address in brackets, or anything else, it returns the error's text.
func checkBracketedHost(host string) string {
	if rest, ok := strings.CutPrefix(host, "v"); ok {
		hex, tail, found := strings.Cut(rest, ".")
		if !found || hex == "" || tail == "" || strings.Trim(hex, "0123456789abcdefABCDEF") != "" {
			return "IPvFuture address is invalid"
		}
		return ""
	}
	addr, err := netip.ParseAddr(host)
	switch {
	case err != nil || strings.Count(host, "%") > 1: // ipaddress allows no "%" in a zone
		return "'" + host + "' does not appear to be an IPv4 or IPv6 address"
	case addr.Is4():
		return "An IPv4 address cannot be in brackets"
	}
	return ""
}

// checkNetloc is urllib's _checknetloc: for a non-ASCII netloc that NFKC
// normalisation (as IDNA applies it) turns into one holding "/", "?", "#",
// "@" or ":", it returns the error's text.
func checkNetloc(netloc string) string {
	isASCII := true
	for i := 0; i < len(netloc); i++ {
		if netloc[i] >= 0x80 {
			isASCII = false
			break
		}
	}
	if isASCII {
		return ""
	}
	n := strings.NewReplacer("@", "", ":", "", "#", "", "?", "").Replace(netloc)
	if n2 := norm.NFKC.String(n); n2 != n && strings.ContainsAny(n2, "/?#@:") {
		return "netloc '" + netloc + "' contains invalid characters under NFKC normalization"
	}
	return ""
}

// pyHostname is urllib's SplitResult.hostname: the host in the netloc's
// part after its last "@", without the port (what follows the first ":",
// or for a bracketed host, what is outside the brackets), lowercased but
// for an IPv6 zone; "" where Python's is None.
func pyHostname(netloc string) string {
	hostinfo := netloc
	if i := strings.LastIndexByte(netloc, '@'); i >= 0 {
		hostinfo = netloc[i+1:]
	}
	var host string
	if _, bracketed, ok := strings.Cut(hostinfo, "["); ok {
		host, _, _ = strings.Cut(bracketed, "]")
	} else {
		host, _, _ = strings.Cut(hostinfo, ":")
	}
	if h, zone, ok := strings.Cut(host, "%"); ok {
		return strings.ToLower(h) + "%" + zone
	}
	return strings.ToLower(host)
}

// blockedNets are lionagi/ln/_ssrf.py's _BLOCKED_NETS (669ea9b5).
var blockedNets = func() []netip.Prefix {
	var out []netip.Prefix
	for _, c := range []string{
		"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "127.0.0.0/8", "0.0.0.0/8",
		"100.64.0.0/10", "::1/128", "fc00::/7", "::ffff:0:0/96", "fe80::/10", "ff00::/8",
	} {
		out = append(out, netip.MustParsePrefix(c))
	}
	return out
}()

// isBlockedHost reports the hosts LionAGI's SSRF guard refuses that can be
// told without DNS: "localhost" (and names under it), and every address
// form getaddrinfo reads numerically (inet_aton's "2130706433",
// "0x7f000001", "127.1", "0177.0.0.1"; IPv6 with or without a zone) that
// falls in a blocked range once IPv4-mapped and IPv4-compatible addresses
// are unmapped (_unmap_ip).
func isBlockedHost(host string) bool {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	addr, ok := numericHost(strings.Trim(h, "[]"))
	if !ok {
		return false
	}
	if addr.Is6() {
		if addr.Is4In6() {
			addr = addr.Unmap()
		} else if b := addr.As16(); [12]byte(b[:12]) == [12]byte{} {
			addr = netip.AddrFrom4([4]byte(b[12:]))
		}
	}
	for _, n := range blockedNets {
		if n.Contains(addr) {
			return true
		}
	}
	return false
}

// numericHost reads host as getaddrinfo does with numeric input: IPv6
// text (a zone dropped), or IPv4 in inet_aton's forms.
func numericHost(host string) (netip.Addr, bool) {
	if strings.Contains(host, ":") {
		if i := strings.IndexByte(host, '%'); i >= 0 {
			host = host[:i]
		}
		a, err := netip.ParseAddr(host)
		return a, err == nil
	}
	return inetAton(host)
}

// inetAton is glibc's inet_aton: one to four parts separated by dots, each
// decimal, octal (leading 0) or hex (0x); the last part fills the bytes
// the others leave.
func inetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 || s == "" {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		base, digits := uint64(10), p
		switch {
		case len(p) > 1 && (p[:2] == "0x" || p[:2] == "0X"):
			base, digits = 16, p[2:]
		case len(p) > 1 && p[0] == '0':
			base, digits = 8, p[1:]
		}
		if p == "" || (digits == "" && base != 16) {
			return netip.Addr{}, false
		}
		var v uint64
		for _, c := range digits {
			var d uint64
			switch {
			case c >= '0' && c <= '9':
				d = uint64(c - '0')
			case base == 16 && c >= 'a' && c <= 'f':
				d = uint64(c-'a') + 10
			case base == 16 && c >= 'A' && c <= 'F':
				d = uint64(c-'A') + 10
			default:
				return netip.Addr{}, false
			}
			if d >= base {
				return netip.Addr{}, false
			}
			if v = v*base + d; v > 0xffffffff {
				return netip.Addr{}, false
			}
		}
		vals[i] = v
	}
	var ip uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
		ip |= v << (24 - 8*uint(i))
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*uint(5-len(vals))) {
		return netip.Addr{}, false
	}
	ip |= last
	return netip.AddrFrom4([4]byte{byte(ip >> 24), byte(ip >> 16), byte(ip >> 8), byte(ip)}), true
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
