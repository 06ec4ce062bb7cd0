package redistest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TLSCluster is a one-master Redis Cluster that clients reach over TLS
// only as far as the cluster's slot map says: its node announces TLSAddr
// (tls-cluster yes), and its certificate, for 127.0.0.1, is signed by the
// authority in CAFile. The plain port (Server.Addr) stays open for the
// test's own setup.
type TLSCluster struct {
	*Cluster
	TLSAddr string
	CAFile  string
}

// StartTLSCluster starts a TLSCluster: its certificates made for the test
// (an ECDSA P-256 authority and a server certificate with IP SAN
// 127.0.0.1, valid an hour), every slot on its one master.
func StartTLSCluster(tb testing.TB) *TLSCluster {
	tb.Helper()
	dir := tb.TempDir()
	ca, cert, key := WriteTestCerts(tb, dir)
	port, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	tlsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	m := StartWith(tb, Options{Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca,
		"--tls-auth-clients", "no", "--tls-cluster", "yes", "--cluster-announce-ip", "127.0.0.1"}})
	c := &Cluster{Masters: []*Server{m}, Replicas: make([][]*Server, 1)}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.join(ctx); err != nil {
		tb.Fatalf("redistest: TLS cluster: %v", err)
	}
	return &TLSCluster{Cluster: c, TLSAddr: tlsAddr, CAFile: ca}
}

// TLSSentinel is a master and a Sentinel monitoring it, both reached by
// clients over TLS (the Sentinel monitors the master at its TLS port and
// names that port), their certificates signed by CAFile's authority. The
// servers' plain ports stay open for the test's own setup.
type TLSSentinel struct {
	Master, Sentinel       *Server
	MasterTLS, SentinelTLS string // host:port of their TLS ports
	MasterName, CAFile     string
}

// StartTLSSentinel starts a TLSSentinel (certificates as StartTLSCluster's)
// and waits until the Sentinel names the master's TLS port.
func StartTLSSentinel(tb testing.TB) *TLSSentinel {
	tb.Helper()
	ca, cert, key := WriteTestCerts(tb, tb.TempDir())
	tlsArgs := func(port int) []string {
		return []string{"--tls-port", strconv.Itoa(port), "--tls-cert-file", cert, "--tls-key-file", key,
			"--tls-ca-cert-file", ca, "--tls-auth-clients", "no", "--tls-replication", "yes"}
	}
	mport, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	st := &TLSSentinel{MasterName: "sluice-tls", CAFile: ca, MasterTLS: net.JoinHostPort("127.0.0.1", strconv.Itoa(mport))}
	st.Master = StartWith(tb, Options{Args: tlsArgs(mport)})
	sport, err := freePort()
	if err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	st.SentinelTLS = net.JoinHostPort("127.0.0.1", strconv.Itoa(sport))
	conf := fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1\nsentinel down-after-milliseconds %s %d\n",
		st.MasterName, mport, st.MasterName, DownAfter.Milliseconds())
	st.Sentinel = StartWith(tb, Options{ConfigFile: conf, Args: append([]string{"--sentinel"}, tlsArgs(sport)...)})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sc := redis.NewSentinelClient(&redis.Options{Addr: st.Sentinel.Addr})
	defer sc.Close()
	if err := waitFor(ctx, func() error {
		addr, err := sc.GetMasterAddrByName(ctx, st.MasterName).Result()
		if err == nil && net.JoinHostPort(addr[0], addr[1]) != st.MasterTLS {
			err = fmt.Errorf("the Sentinel names %v, not %s", addr, st.MasterTLS)
		}
		return err
	}); err != nil {
		tb.Fatalf("redistest: TLS sentinel: %v", err)
	}
	return st
}

// WriteTestCerts writes into dir a test authority (ECDSA P-256, valid an
// hour) and a server certificate and key for 127.0.0.1 signed by it, and
// returns their paths.
func WriteTestCerts(tb testing.TB, dir string) (ca, cert, key string) {
	tb.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	srvTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		tb.Fatal(err)
	}
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			tb.Fatal(err)
		}
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", srvDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}
