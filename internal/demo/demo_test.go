package demo

import (
	"bytes"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/app"
)

// The demo's listener: a port the user chose that is busy is an error (the
// examples they run would reach the other server); the default port falls
// back to a free one; a non-loopback address is refused before binding.
func TestListen(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	var stderr bytes.Buffer

	_, _, err = listen(busy.Addr().String(), true, &stderr)
	require.ErrorContains(t, err, "--listen "+busy.Addr().String())
	require.ErrorContains(t, err, "pick another port")

	ln, base, err := listen(busy.Addr().String(), false, &stderr)
	require.NoError(t, err)
	defer ln.Close()
	require.NotEqual(t, "http://"+busy.Addr().String(), base)
	require.Contains(t, stderr.String(), "is taken; serving on "+ln.Addr().String())

	_, _, err = listen("0.0.0.0:0", true, &stderr)
	require.ErrorIs(t, err, app.ErrExposed)
}
