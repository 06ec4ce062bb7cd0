package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/sluice-dev/sluice/tasks"
)

// MinKeyBytes is the shortest API key ParseKeys accepts: 16 bytes, 128 bits
// when random. `openssl rand -hex 32` makes a good one.
const MinKeyBytes = 16

// Realm is the realm of the WWW-Authenticate challenges.
const Realm = "sluice"

// Principal is who an authenticated request is made by.
type Principal struct {
	// ID names the key without revealing it: "key-" and the first 8 hex
	// digits of the key's SHA-256 ("key-1a2b3c4d"). It is what rate-limit
	// keys and logs use; the key itself is never stored or logged.
	ID string
	// Tenant is the tenant the key is bound to ("key:tenant" in
	// SLUICE_API_KEYS), or "" for a key that may act for any tenant.
	Tenant string
}

// Keys is a set of API keys; build it with ParseKeys. A nil *Keys is empty.
// It is safe for concurrent use.
type Keys struct {
	digests [][sha256.Size]byte // SHA-256 of each key
	who     []Principal         // by the same index
}

// ParseKeys reads the value of SLUICE_API_KEYS (config.APIKeysEnv): a
// comma-separated list of "key" or "key:tenant" items, spaces around items,
// keys and tenants ignored. An empty or blank value is an empty set (no
// authentication). Errors name the item by its 1-based position and never
// show a key:
//
//   - an empty item ("a,,b", a trailing comma);
//   - a key under MinKeyBytes bytes, or with a byte outside printable ASCII
//     (spaces and control characters included);
//   - "key:" with nothing after the colon, a tenant tasks.ValidTenant
//     refuses, or one with whitespace or ';' (the tenant is not shown
//     either: with a wrong separator, "k1:acme k2" or "k1:acme;k2", it
//     would hold the next key);
//   - the same key twice, or two keys whose Principal.ID would be the same
//     (a 1 in 4 billion chance per pair: replace one of them).
//
// A tenant may contain ':' (only the first one separates it from the key)
// but not ','.
func ParseKeys(value string) (*Keys, error) {
	k := &Keys{}
	if strings.TrimSpace(value) == "" {
		return k, nil
	}
	seen := map[string]int{} // Principal.ID → position
	for i, item := range strings.Split(value, ",") {
		pos := i + 1
		item = strings.TrimSpace(item)
		if item == "" {
			return nil, fmt.Errorf("%s: item %d is empty (want key or key:tenant)", envName, pos)
		}
		key, tenant, bound := strings.Cut(item, ":")
		key, tenant = strings.TrimSpace(key), strings.TrimSpace(tenant)
		if err := checkKey(key); err != nil {
			return nil, fmt.Errorf("%s: item %d: key %w (the key is not shown)", envName, pos, err)
		}
		if bound && tenant == "" {
			return nil, fmt.Errorf("%s: item %d: nothing after ':' (want key:tenant, or the key alone for every tenant)", envName, pos)
		}
		if tasks.ValidTenant(tenant) != nil || strings.ContainsFunc(tenant, func(r rune) bool { return unicode.IsSpace(r) || r == ';' }) {
			// Not shown: a list with a wrong separator ("k1:acme k2")
			// would put a key in the tenant.
			return nil, fmt.Errorf("%s: item %d: tenant is not at most %d bytes of UTF-8 without whitespace, control characters or ';' (separate items with ','; the value is not shown)",
				envName, pos, tasks.MaxTenantBytes)
		}
		d := sha256.Sum256([]byte(key))
		p := Principal{ID: principalID(d), Tenant: tenant}
		if prev, dup := seen[p.ID]; dup {
			if k.digests[prev-1] == d {
				return nil, fmt.Errorf("%s: items %d and %d are the same key", envName, prev, pos)
			}
			return nil, fmt.Errorf("%s: items %d and %d have the same key ID %s; replace one of the keys", envName, prev, pos, p.ID)
		}
		seen[p.ID] = pos
		k.digests = append(k.digests, d)
		k.who = append(k.who, p)
	}
	return k, nil
}

// envName is how errors name the keys' source.
const envName = "SLUICE_API_KEYS"

// checkKey requires at least MinKeyBytes bytes of printable ASCII without
// spaces. The error never shows the key.
func checkKey(key string) error {
	if len(key) < MinKeyBytes {
		return fmt.Errorf("is %d bytes, want at least %d", len(key), MinKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c >= 0x7f {
			return fmt.Errorf("has a space, control character or non-ASCII byte at byte %d", i)
		}
	}
	return nil
}

func principalID(d [sha256.Size]byte) string { return "key-" + hex.EncodeToString(d[:4]) }

// Empty reports whether there are no keys (authentication is off).
func (k *Keys) Empty() bool { return k == nil || len(k.digests) == 0 }

// Len is the number of keys.
func (k *Keys) Len() int {
	if k == nil {
		return 0
	}
	return len(k.digests)
}

// Principals returns who each key stands for, in SLUICE_API_KEYS order: for
// a startup log line ("3 API keys: key-1a2b3c4d (tenant acme), ...").
func (k *Keys) Principals() []Principal {
	if k == nil {
		return nil
	}
	return append([]Principal(nil), k.who...)
}

// Authenticate returns the principal of key, or false. It compares the
// key's SHA-256 with every key's in constant time, and always with all of
// them, so the time taken tells nothing about which key, or which prefix,
// is close.
func (k *Keys) Authenticate(key string) (Principal, bool) {
	if k.Empty() || key == "" {
		return Principal{}, false
	}
	d := sha256.Sum256([]byte(key))
	found := -1
	for i := range k.digests {
		if subtle.ConstantTimeCompare(d[:], k.digests[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Principal{}, false
	}
	return k.who[found], true
}

// RequireOptions configures Keys.Require.
type RequireOptions struct {
	// Basic also accepts HTTP Basic authentication with any user name and
	// an API key as the password, and adds a Basic challenge to the 401, so
	// a browser asks for it (the dashboards). Default false: only
	// "Authorization: Bearer <key>".
	Basic bool
}

type principalKey struct{}

// PrincipalFrom returns the principal Require put in ctx, or false when the
// request was not authenticated (no keys are configured).
func PrincipalFrom(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}

// WithPrincipal returns ctx carrying p, as Require stores it (for tests and
// for handlers authenticated by other means).
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// Require serves next only to requests with a valid key: "Authorization:
// Bearer <key>", or with opts.Basic also "Authorization: Basic" with any
// user and the key as password. The principal goes in the request context
// (PrincipalFrom). Other requests get 401 Unauthorized with
//
//	WWW-Authenticate: Bearer realm="sluice"[, error="invalid_token"]
//	WWW-Authenticate: Basic realm="sluice", charset="UTF-8"   (with opts.Basic)
//	Content-Type: application/problem+json
//
// and an RFC 9457 problem body. error="invalid_token" (RFC 6750 §3.1) is
// added when a Bearer token was sent and is not a key. Nothing about the
// presented credentials is logged or echoed.
//
// With empty keys (k nil or Empty) Require returns next unchanged:
// authentication is off and PrincipalFrom reports false. `sluice serve`
// allows that only on a loopback address.
func (k *Keys) Require(opts RequireOptions, next http.Handler) http.Handler {
	if k.Empty() {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key, scheme := credentials(r, opts.Basic)
		if p, ok := k.Authenticate(key); ok {
			next.ServeHTTP(w, r.WithContext(WithPrincipal(r.Context(), p)))
			return
		}
		bearer := `Bearer realm="` + Realm + `"`
		detail := "this endpoint needs an API key: send Authorization: Bearer <key>"
		if opts.Basic {
			detail += ", or HTTP Basic authentication with the key as password"
		}
		if scheme != "" {
			detail = "the API key is not valid"
			if scheme == "bearer" {
				bearer += `, error="invalid_token"`
			}
		}
		w.Header().Add("WWW-Authenticate", bearer)
		if opts.Basic {
			w.Header().Add("WWW-Authenticate", `Basic realm="`+Realm+`", charset="UTF-8"`)
		}
		writeProblem(w, &Problem{Type: typeUnauthorized, Title: "Unauthorized", Status: http.StatusUnauthorized, Detail: detail})
	})
}

// credentials returns the key a request presents and its scheme ("bearer"
// or "basic"), or "" and "" when it presents none Require accepts.
// Authentication schemes are case-insensitive (RFC 9110 §11.1).
func credentials(r *http.Request, basic bool) (key, scheme string) {
	h := r.Header.Get("Authorization")
	name, rest, _ := strings.Cut(h, " ")
	switch {
	case strings.EqualFold(name, "Bearer"):
		return strings.TrimSpace(rest), "bearer"
	case basic && strings.EqualFold(name, "Basic"):
		if _, pass, ok := r.BasicAuth(); ok {
			return pass, "basic"
		}
		return "", "basic"
	}
	return "", ""
}
