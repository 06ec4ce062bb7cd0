package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/api"
)

func TestParseKeys(t *testing.T) {
	t.Parallel()
	k, err := api.ParseKeys(" " + adminKey + " ,\t" + acmeKey + " : acme:eu ")
	require.NoError(t, err)
	require.False(t, k.Empty())
	require.Equal(t, 2, k.Len())
	ps := k.Principals()
	require.Equal(t, "", ps[0].Tenant)
	require.Equal(t, "acme:eu", ps[1].Tenant, "only the first ':' separates the tenant")
	require.Regexp(t, `^key-[0-9a-f]{8}$`, ps[0].ID)
	require.NotEqual(t, ps[0].ID, ps[1].ID)

	p, ok := k.Authenticate(acmeKey)
	require.True(t, ok)
	require.Equal(t, ps[1], p)
	_, ok = k.Authenticate(acmeKey + "x")
	require.False(t, ok)
	_, ok = k.Authenticate("")
	require.False(t, ok)

	for _, v := range []string{"", "  ", "\t"} {
		k, err := api.ParseKeys(v)
		require.NoError(t, err)
		require.True(t, k.Empty())
	}
	var nilKeys *api.Keys
	require.True(t, nilKeys.Empty())
	_, ok = nilKeys.Authenticate(adminKey)
	require.False(t, ok)
}

func TestParseKeysErrors(t *testing.T) {
	t.Parallel()
	short := "short-key-123"
	for _, tc := range []struct {
		value, want string
	}{
		{adminKey + ",," + acmeKey, "item 2 is empty"},
		{adminKey + ",", "item 2 is empty"},
		{short, "item 1: key is 13 bytes, want at least 16 (the key is not shown)"},
		{"0123456789abcdef 0123", "item 1: key has a space, control character or non-ASCII byte at byte 16"},
		{"0123456789abcdef\x00", "item 1: key has a space"},
		{"0123456789abcdefé", "item 1: key has a space"},
		{adminKey + ":", "item 1: nothing after ':'"},
		{adminKey + ":acme\n" + acmeKey, "item 1: tenant is not at most 128 bytes of UTF-8 without whitespace, control characters or ';' (separate items with ','; the value is not shown)"},
		{adminKey + ":acme " + acmeKey, "item 1: tenant is not"},
		{adminKey + ":acme;" + acmeKey, "item 1: tenant is not"},
		{adminKey + ":" + strings.Repeat("t", 129), "item 1: tenant is not at most 128 bytes"},
		{adminKey + "," + acmeKey + "," + adminKey + ":acme", "items 1 and 3 are the same key"},
	} {
		_, err := api.ParseKeys(tc.value)
		require.Error(t, err, "%q", tc.value)
		require.Contains(t, err.Error(), tc.want)
		require.True(t, strings.HasPrefix(err.Error(), "SLUICE_API_KEYS: "), err.Error())
		for _, key := range []string{adminKey, acmeKey, short, "0123456789abcdef"} {
			require.NotContains(t, err.Error(), key, "the error shows a key")
		}
	}
}

func FuzzParseKeys(f *testing.F) {
	f.Add(keysEnv)
	f.Add(adminKey + ",," + acmeKey)
	f.Add(adminKey + ":")
	f.Add("a:b:c,d")
	f.Fuzz(func(t *testing.T, v string) {
		k, err := api.ParseKeys(v)
		if err != nil {
			// No key of 16 bytes or more may appear in an error.
			for item := range strings.SplitSeq(v, ",") {
				key, _, _ := strings.Cut(strings.TrimSpace(item), ":")
				if key = strings.TrimSpace(key); len(key) >= api.MinKeyBytes && strings.Contains(err.Error(), key) {
					t.Fatalf("error %q shows key %q", err, key)
				}
			}
			return
		}
		for _, p := range k.Principals() {
			if !strings.HasPrefix(p.ID, "key-") || len(p.ID) != 12 {
				t.Fatalf("principal ID %q", p.ID)
			}
		}
	})
}

func TestRequire(t *testing.T) {
	t.Parallel()
	k, err := api.ParseKeys(keysEnv)
	require.NoError(t, err)
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, found := api.PrincipalFrom(r.Context())
		require.True(t, found)
		fmt.Fprintf(w, "%s %s", p.ID, p.Tenant)
	})
	acme, _ := k.Authenticate(acmeKey)
	for _, tc := range []struct {
		name       string
		basic      bool
		set        func(*http.Request)
		wantStatus int
		wantBody   string
		wantAuth   []string // WWW-Authenticate
	}{
		{"bearer", false, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+acmeKey) }, 200, acme.ID + " acme", nil},
		{"bearer scheme in any case", false, func(r *http.Request) { r.Header.Set("Authorization", "bEARER "+acmeKey) }, 200, acme.ID + " acme", nil},
		{"no credentials", false, func(*http.Request) {}, 401, "", []string{`Bearer realm="sluice"`}},
		{"wrong bearer", false, func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+acmeKey+"0") }, 401, "",
			[]string{`Bearer realm="sluice", error="invalid_token"`}},
		{"basic refused without Basic", false, func(r *http.Request) { r.SetBasicAuth("any", acmeKey) }, 401, "", []string{`Bearer realm="sluice"`}},
		{"basic, any user", true, func(r *http.Request) { r.SetBasicAuth("anyone", acmeKey) }, 200, acme.ID + " acme", nil},
		{"basic, no user", true, func(r *http.Request) { r.SetBasicAuth("", adminKey) }, 200, "", nil},
		{"basic, wrong key", true, func(r *http.Request) { r.SetBasicAuth("admin", "not-the-key-0123456789") }, 401, "",
			[]string{`Bearer realm="sluice"`, `Basic realm="sluice", charset="UTF-8"`}},
		{"basic, key as user", true, func(r *http.Request) { r.SetBasicAuth(acmeKey, "") }, 401, "",
			[]string{`Bearer realm="sluice"`, `Basic realm="sluice", charset="UTF-8"`}},
		{"malformed basic", true, func(r *http.Request) { r.Header.Set("Authorization", "Basic %%%") }, 401, "",
			[]string{`Bearer realm="sluice"`, `Basic realm="sluice", charset="UTF-8"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			req := httptest.NewRequest("GET", "/limits/", nil)
			tc.set(req)
			rec := httptest.NewRecorder()
			k.Require(api.RequireOptions{Basic: tc.basic}, ok).ServeHTTP(rec, req)
			require.Equal(t, tc.wantStatus, rec.Code, rec.Body.String())
			if tc.wantStatus == 200 {
				if tc.wantBody != "" {
					require.Equal(t, tc.wantBody, rec.Body.String())
				}
				return
			}
			require.Equal(t, tc.wantAuth, rec.Header().Values("WWW-Authenticate"))
			require.Equal(t, "application/problem+json", rec.Header().Get("Content-Type"))
			var p api.Problem
			require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &p))
			require.Equal(t, 401, p.Status)
			require.NotEmpty(t, p.Type)
			for _, key := range []string{adminKey, acmeKey} {
				require.NotContains(t, rec.Body.String(), key)
			}
		})
	}
}

func TestRequireWithoutKeys(t *testing.T) {
	t.Parallel()
	var served bool
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, found := api.PrincipalFrom(r.Context())
		require.False(t, found)
		served = true
	})
	var k *api.Keys
	k.Require(api.RequireOptions{Basic: true}, next).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	require.True(t, served, "empty keys: authentication is off")
}

func ExampleParseKeys() {
	keys, err := api.ParseKeys("0123456789abcdef0123456789abcdef, fedcba9876543210fedcba9876543210:acme")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range keys.Principals() {
		fmt.Printf("%s tenant=%q\n", p.ID, p.Tenant)
	}
	_, err = api.ParseKeys("0123456789abcdef0123456789abcdef,,too-short")
	fmt.Println(err)
	// Output:
	// key-3eb1bd43 tenant=""
	// key-4ba68aa8 tenant="acme"
	// SLUICE_API_KEYS: item 2 is empty (want key or key:tenant)
}
