package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartTLS runs a new redis-server that speaks only TLS (--port 0
// --tls-port), on a free loopback port, with a throwaway CA and a server
// certificate for 127.0.0.1 generated for the test; clients need no
// certificate (--tls-auth-clients no). ClientTLS gives the configuration
// that trusts it. It is stopped when the test ends. redis-server must be
// built with TLS (Debian's is).
func StartTLS(t testing.TB, args ...string) *Server {
	t.Helper()
	return launch(t, " with TLS", func(s *Server) {
		s.args = args
		s.tlsCA, s.tlsFiles = writeTLSFiles(t, s.dir)
	})
}

// ClientTLS returns a TLS configuration that trusts the server's throwaway
// CA (nil for a plaintext server).
func (s *Server) ClientTLS() *tls.Config {
	if s.tlsCA == nil {
		return nil
	}
	return &tls.Config{RootCAs: s.tlsCA, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
}

// CAFile returns the path of the PEM file of the server's throwaway CA
// ("" for a plaintext server).
func (s *Server) CAFile() string { return s.tlsFiles[2] }

// tlsArgs are the options of a TLS-only server.
func (s *Server) tlsArgs() []string {
	return []string{"--port", "0", "--tls-port", strconv.Itoa(s.Port), "--tls-cert-file", s.tlsFiles[0],
		"--tls-key-file", s.tlsFiles[1], "--tls-ca-cert-file", s.tlsFiles[2], "--tls-auth-clients", "no"}
}

// pingOptions are the options of the client that waits for the server.
func (s *Server) pingOptions() *redis.Options {
	return &redis.Options{Addr: s.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond, TLSConfig: s.ClientTLS()}
}

// writeTLSFiles generates a CA and a server certificate for 127.0.0.1 signed
// by it, writes the certificate, key and CA as PEM files in dir, and returns
// the CA as a pool and the three paths.
func writeTLSFiles(t testing.TB, dir string) (*x509.CertPool, [3]string) {
	t.Helper()
	now := time.Now()
	ca, caKey := newCert(t, &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "redistest CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}, nil, nil)
	cert, key := newCert(t, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, ca, caKey)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatalf("redistest: server key: %v", err)
	}
	files := [3]string{filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key"), filepath.Join(dir, "ca.crt")}
	for i, b := range []*pem.Block{{Type: "CERTIFICATE", Bytes: cert.Raw}, {Type: "PRIVATE KEY", Bytes: keyDER}, {Type: "CERTIFICATE", Bytes: ca.Raw}} {
		if err := os.WriteFile(files[i], pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return pool, files
}

// newCert generates a key and a certificate from tmpl, signed by parent's
// key (self-signed when parent is nil). The certificate's Raw is its DER.
func newCert(t testing.TB, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("redistest: %s key: %v", tmpl.Subject.CommonName, err)
	}
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatalf("redistest: %s certificate: %v", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("redistest: %s certificate: %v", tmpl.Subject.CommonName, err)
	}
	return cert, key
}
