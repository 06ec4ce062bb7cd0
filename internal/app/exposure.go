package app

import (
	"errors"
	"fmt"
	"net"
)

// ErrExposed is CheckExposure's error: the server would answer the network
// with no API keys to check.
var ErrExposed = errors.New("refusing to serve a non-loopback address with no API keys: set SLUICE_API_KEYS (\"key\" or \"key:tenant\", comma-separated) or listen on 127.0.0.1")

// CheckExposure refuses addr, the address serve's listener is bound to,
// when it is not a loopback address and auth is false: the enqueue API and
// the dashboards would be open to anyone who reaches the host. An
// unspecified address (":9090", "0.0.0.0", "[::]") listens on every
// interface and counts as exposed. The error wraps ErrExposed and names
// the address.
//
// listen is the configured address, which the error names beside addr
// when they differ ("0.0.0.0:9090" is bound as "[::]:9090").
func CheckExposure(listen string, addr net.Addr, auth bool) error {
	if auth {
		return nil
	}
	tcp, ok := addr.(*net.TCPAddr)
	if ok && tcp.IP.IsLoopback() {
		return nil
	}
	if listen != "" && listen != addr.String() {
		return fmt.Errorf("http.listen %s (bound as %s): %w", listen, addr, ErrExposed)
	}
	return fmt.Errorf("http.listen %s: %w", addr, ErrExposed)
}

// CheckListen is CheckExposure before the bind, for what the configured
// address alone shows: an IP that is not loopback, or no host (every
// interface). A name is left to CheckExposure, after the bind resolved it.
// So "192.0.2.1:9090" is refused for what it is, not with the bind error of
// an address the host does not have.
func CheckListen(listen string, auth bool) error {
	if auth {
		return nil
	}
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return nil // the bind reports it
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && !ip.IsLoopback() {
		return fmt.Errorf("http.listen %s: %w", listen, ErrExposed)
	}
	return nil
}
