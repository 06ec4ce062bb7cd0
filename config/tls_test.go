package config

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-dev/sluice/internal/redistest"
)

// redis.tls_ca_file is read relative to the configuration file's
// directory, and must hold a certificate.
func TestRedisTLSCAFileIsBesideTheConfig(t *testing.T) {
	dir := t.TempDir()
	certs := filepath.Join(dir, "certs")
	require.NoError(t, os.MkdirAll(certs, 0o700))
	ca, _, _ := redistest.WriteTestCerts(t, certs)
	require.Equal(t, filepath.Join(certs, "ca.pem"), ca)
	require.NoError(t, os.WriteFile(filepath.Join(certs, "empty.pem"), []byte("not a certificate\n"), 0o600))

	path := filepath.Join(dir, "sluice.yaml")
	require.NoError(t, os.WriteFile(path, []byte("redis:\n  mode: cluster\n  addrs: [10.0.0.1:7000]\n  tls: true\n  tls_ca_file: certs/ca.pem\n  tls_server_name: redis.example.com\n"), 0o600))
	cfg, err := Load(path)
	require.NoError(t, err)
	require.True(t, cfg.Redis.TLS)
	require.Equal(t, ca, cfg.Redis.TLSCAFile)
	require.Equal(t, "redis.example.com", cfg.Redis.TLSServerName)

	require.NoError(t, os.WriteFile(path, []byte("redis:\n  mode: cluster\n  addrs: [10.0.0.1:7000]\n  tls: true\n  tls_ca_file: certs/empty.pem\n"), 0o600))
	_, err = Load(path)
	require.ErrorContains(t, err, "sluice.yaml:5:16: redis.tls_ca_file: "+filepath.Join(dir, "certs", "empty.pem")+" holds no PEM certificate")
}
