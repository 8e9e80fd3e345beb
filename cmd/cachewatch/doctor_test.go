package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cachewatch/cachewatch/exporter/doctor"
	"github.com/cachewatch/cachewatch/internal/redistest"
)

func TestDoctorCommandExitStatus(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	if err := rdb.Set(ctx, "lock:job:1", "tok", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	args := []string{"doctor", "--redis.url", "redis://" + srv.Addr, "--interval", "50ms", "--format", "json"}
	var out, errOut bytes.Buffer
	if code := run(ctx, args, &out, &errOut); code != 0 {
		t.Fatalf("healthy Redis: exit %d, %s", code, errOut.String())
	}
	var r doctor.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	if len(r.Nodes) != 1 || !r.Nodes[0].Up || r.Critical() {
		t.Fatalf("report %+v", r)
	}

	// A lock without TTL is critical: exit 1, so a deploy gate fails.
	if err := rdb.Set(ctx, "lock:job:2", "tok", 0).Err(); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if code := run(ctx, []string{"doctor", "--redis", "redis://" + srv.Addr, "--interval", "50ms"}, &out, &errOut); code != 1 {
		t.Fatalf("lock without TTL: exit %d, want 1\n%s", code, out.String())
	}
	if !strings.Contains(out.String(), "CRITICAL  locks_without_ttl  lock:job:*") {
		t.Fatalf("text report:\n%s", out.String())
	}

	// Nothing to sample: exit 3 with a clear error, and the report says
	// which node failed.
	addr := freeListenAddr(t)
	errOut.Reset()
	out.Reset()
	if code := run(ctx, []string{"doctor", "--redis.addr", addr}, &out, &errOut); code != 3 ||
		!strings.Contains(errOut.String(), "no Redis node could be sampled") || !strings.Contains(out.String(), addr+": not sampled") {
		t.Fatalf("unreachable: exit %d, %s\n%s", code, errOut.String(), out.String())
	}
}

// rediss:// with --redis.tls-ca-file reaches a TLS-only port of a real
// redis-server and verifies its certificate; without the CA it fails.
func TestDoctorOverTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir)
	tlsAddr := freeListenAddr(t)
	_, tlsPort, _ := net.SplitHostPort(tlsAddr)
	redistest.Start(t, "--tls-port", tlsPort, "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--tls-ca-cert-file", certFile, "--tls-auth-clients", "no")
	var out, errOut bytes.Buffer
	args := []string{"doctor", "--redis", "rediss://" + tlsAddr, "--redis.tls-ca-file", certFile, "--interval", "10ms", "--format", "json"}
	if code := run(context.Background(), args, &out, &errOut); code != 0 {
		t.Fatalf("over TLS: exit %d: %s", code, errOut.String())
	}
	var r doctor.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil || len(r.Nodes) != 1 || !r.Nodes[0].Up {
		t.Fatalf("report %s (%v)", out.String(), err)
	}
	errOut.Reset()
	if code := run(context.Background(), args[:3], &out, &errOut); code != 3 || !strings.Contains(errOut.String(), "certificate") {
		t.Fatalf("unknown CA: exit %d: %s", code, errOut.String())
	}
}

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 and its key.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "cachewatch test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	for path, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certFile, keyFile
}

// A run that could not sample everything exits 3 with the reason, and
// still prints what it found.
func TestDoctorIncompleteExitsThree(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := srv.Client(t)
	if err := admin.Do(ctx, "ACL", "SETUSER", "sampler", "on", ">pw", "~*", "+@all", "-scan").Err(); err != nil {
		t.Fatal(err)
	}
	t.Setenv(PasswordEnv, "pw")
	var out, errOut bytes.Buffer
	args := []string{"doctor", "--redis.url", "redis://sampler@" + srv.Addr, "--interval", "10ms", "--format", "json"}
	if code := run(ctx, args, &out, &errOut); code != exitIncomplete || !strings.Contains(errOut.String(), "incomplete") {
		t.Fatalf("exit %d, stderr %s", code, errOut.String())
	}
	var r doctor.Report
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("json: %v\n%s", err, out.String())
	}
	if len(r.Nodes) != 1 || !r.Nodes[0].Up || r.Nodes[0].Version == "" || len(r.Incomplete) == 0 ||
		!strings.Contains(r.Incomplete[0], "scan") {
		t.Fatalf("report %+v", r)
	}
}
