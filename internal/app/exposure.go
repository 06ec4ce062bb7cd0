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
func CheckExposure(addr net.Addr, auth bool) error {
	if auth {
		return nil
	}
	tcp, ok := addr.(*net.TCPAddr)
	if ok && tcp.IP.IsLoopback() {
		return nil
	}
	return fmt.Errorf("http.listen %s: %w", addr, ErrExposed)
}
