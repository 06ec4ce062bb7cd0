package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// redis.tls_ca_file is read relative to the configuration file's
// directory, and must hold a certificate.
func TestRedisTLSCAFileIsBesideTheConfig(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "certs"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "certs", "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "certs", "empty.pem"), []byte("not a certificate\n"), 0o600))

	path := filepath.Join(dir, "sluice.yaml")
	require.NoError(t, os.WriteFile(path, []byte("redis:\n  mode: cluster\n  addrs: [10.0.0.1:7000]\n  tls: true\n  tls_ca_file: certs/ca.pem\n  tls_server_name: redis.example.com\n"), 0o600))
	cfg, err := Load(path)
	require.NoError(t, err)
	require.True(t, cfg.Redis.TLS)
	require.Equal(t, filepath.Join(dir, "certs", "ca.pem"), cfg.Redis.TLSCAFile)
	require.Equal(t, "redis.example.com", cfg.Redis.TLSServerName)

	require.NoError(t, os.WriteFile(path, []byte("redis:\n  mode: cluster\n  addrs: [10.0.0.1:7000]\n  tls: true\n  tls_ca_file: certs/empty.pem\n"), 0o600))
	_, err = Load(path)
	require.ErrorContains(t, err, "sluice.yaml:5:16: redis.tls_ca_file: "+filepath.Join(dir, "certs", "empty.pem")+" holds no PEM certificate")
}
