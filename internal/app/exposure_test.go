package app

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func TestCheckExposureRefusesOpenAddressesWithoutKeys(t *testing.T) {
	for _, c := range []struct {
		addr string
		auth bool
		ok   bool
	}{
		{"127.0.0.1:9090", false, true},
		{"127.3.4.5:9090", false, true},
		{"[::1]:9090", false, true},
		{"0.0.0.0:9090", false, false},
		{"[::]:9090", false, false},
		{"192.0.2.10:9090", false, false},
		{"[2001:db8::1]:9090", false, false},
		{"[::ffff:127.0.0.1]:9090", false, true},
		{"0.0.0.0:9090", true, true},
		{"192.0.2.10:9090", true, true},
	} {
		a, err := net.ResolveTCPAddr("tcp", c.addr)
		if err != nil {
			t.Fatal(err)
		}
		err = CheckExposure(c.addr, a, c.auth)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrExposed)) {
			t.Errorf("CheckExposure(%s, auth=%v) = %v, want ok=%v", c.addr, c.auth, err, c.ok)
		}
		// Before the bind, the configured address alone says the same for
		// IP literals.
		if pre := CheckListen(c.addr, c.auth); c.ok != (pre == nil) {
			t.Errorf("CheckListen(%s, auth=%v) = %v, want ok=%v", c.addr, c.auth, pre, c.ok)
		}
	}
	// Names are left to the check after the bind; a missing host is every
	// interface.
	if err := CheckListen("localhost:9090", false); err != nil {
		t.Errorf("CheckListen(localhost:9090) = %v", err)
	}
	if err := CheckListen(":9090", false); !errors.Is(err, ErrExposed) {
		t.Errorf("CheckListen(:9090) = %v, want ErrExposed", err)
	}
	// The error names the configured address beside the bound one.
	a, _ := net.ResolveTCPAddr("tcp", "[::]:9090")
	if err := CheckExposure("0.0.0.0:9090", a, false); err == nil || !strings.Contains(err.Error(), "http.listen 0.0.0.0:9090 (bound as [::]:9090)") {
		t.Errorf("CheckExposure names %v", err)
	}
}
