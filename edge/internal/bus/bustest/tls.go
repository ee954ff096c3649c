package bustest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Files of a TLS server in Server.Dir (Options.TLS).
const (
	caFileName   = "ca.pem"
	certFileName = "server.pem"
	keyFileName  = "server-key.pem"
)

// CAFile is the PEM file of the CA that signed the server's certificate
// (the clients' --bus-ca); "" without Options.TLS.
func (s *Server) CAFile() string {
	if !s.TLS {
		return ""
	}
	return filepath.Join(s.Dir, caFileName)
}

// NewCA writes a fresh CA certificate (PEM) in a temporary directory and
// returns its path: a CA that signed no bustest server's certificate (a
// wrong --bus-ca).
func NewCA(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	newCA(t, dir)
	return filepath.Join(dir, caFileName)
}

// ca is a CA's certificate and key.
type ca struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// newCA makes a CA (ECDSA P-256, valid from an hour ago for a day) and
// writes its certificate to dir/ca.pem.
func newCA(t testing.TB, dir string) ca {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{Organization: []string{"tailor bustest"}, CommonName: "bustest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, caFileName), "CERTIFICATE", der)
	return ca{cert, key}
}

// writeTLS writes, in dir, a new CA (ca.pem) and a server certificate it
// signed for IP 127.0.0.1 and DNS localhost (server.pem, server-key.pem).
func writeTLS(t testing.TB, dir string) {
	t.Helper()
	c := newCA(t, dir)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(t),
		Subject:      pkix.Name{Organization: []string{"tailor bustest"}, CommonName: "localhost"},
		NotBefore:    c.cert.NotBefore,
		NotAfter:     c.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, certFileName), "CERTIFICATE", der)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Join(dir, keyFileName), "PRIVATE KEY", kder)
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, path, typ string, der []byte) {
	t.Helper()
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
