package app

import (
	"errors"
	"net"
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
		err = CheckExposure(a, c.auth)
		if c.ok != (err == nil) || (err != nil && !errors.Is(err, ErrExposed)) {
			t.Errorf("CheckExposure(%s, auth=%v) = %v, want ok=%v", c.addr, c.auth, err, c.ok)
		}
	}
}
