package tlsid

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// Files of a CA directory (OUTPUT/tls locally, the CA Secret on
// Kubernetes) and of a process's bundle.
const (
	CACertFile = "ca.crt"
	CAKeyFile  = "ca.key"
	CertFile   = "tls.crt"
	KeyFile    = "tls.key"
)

// skew is how far before now a certificate is valid: clocks of a
// cluster's nodes disagree by seconds, sometimes minutes.
const skew = time.Hour

// CA is a job's certificate authority: it signs the certificates of the
// job's processes and nothing else (its name constraint and path length
// say so).
type CA struct {
	Job     string
	Cert    *x509.Certificate
	CertPEM []byte
	key     *ecdsa.PrivateKey
}

// NewCA creates job's CA, valid from now until notAfter.
func NewCA(job string, now, notAfter time.Time) (*CA, error) {
	if job == "" {
		return nil, fmt.Errorf("new CA: empty job name")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("new CA for job %s: %w", job, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "elasticdl job " + job + " CA", Organization: []string{"elasticdl"}},
		NotBefore:             now.Add(-skew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("new CA for job %s: %w", job, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("new CA for job %s: %w", job, err)
	}
	return &CA{Job: job, Cert: cert, CertPEM: pemBlock("CERTIFICATE", der), key: key}, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic("crypto/rand failed: " + err.Error()) // the kernel's RNG does not fail
	}
	return n
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

// Issue signs a certificate for id, valid from now until notAfter (never
// past the CA's own end), and returns it with its key as a Bundle.
func (ca *CA) Issue(id Identity, now, notAfter time.Time) (Bundle, error) {
	if id.Job != ca.Job {
		return Bundle{}, fmt.Errorf("issue %s: the CA is job %s's", id, ca.Job)
	}
	if !id.Role.valid() {
		return Bundle{}, fmt.Errorf("issue %s: unknown role", id)
	}
	if notAfter.After(ca.Cert.NotAfter) {
		notAfter = ca.Cert.NotAfter
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Bundle{}, fmt.Errorf("issue %s: %w", id, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("%s-%d", id.Role, id.ID), Organization: []string{"elasticdl job " + id.Job}},
		NotBefore:    now.Add(-skew),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		// Every process is both: a worker serves the ring and dials the PS.
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        nil,
		DNSNames:    []string{id.Role.DNSName()},
	}
	tmpl.URIs = append(tmpl.URIs, id.URI())
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.key)
	if err != nil {
		return Bundle{}, fmt.Errorf("issue %s: %w", id, err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Bundle{}, fmt.Errorf("issue %s: %w", id, err)
	}
	return Bundle{CA: ca.CertPEM, Cert: pemBlock("CERTIFICATE", der), Key: pemBlock("PRIVATE KEY", kder)}, nil
}

// Save writes the CA's certificate and key into dir (created 0700), each
// file 0600: the key signs any identity of the job.
func (ca *CA) Save(dir string) error {
	kder, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return fmt.Errorf("save CA of job %s: %w", ca.Job, err)
	}
	return writeFiles(dir, map[string][]byte{CACertFile: ca.CertPEM, CAKeyFile: pemBlock("PRIVATE KEY", kder)})
}

// PEM returns the CA's certificate and key as Save writes them (for a
// Kubernetes Secret).
func (ca *CA) PEM() (cert, key []byte, err error) {
	kder, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("CA of job %s: %w", ca.Job, err)
	}
	return ca.CertPEM, pemBlock("PRIVATE KEY", kder), nil
}

// LoadCA reads the CA that Save wrote into dir; job must be the one it was
// made for (a master given another job's directory refuses it).
func LoadCA(dir, job string) (*CA, error) {
	cpem, err := os.ReadFile(filepath.Join(dir, CACertFile))
	if err != nil {
		return nil, fmt.Errorf("load job CA: %w", err)
	}
	kpem, err := os.ReadFile(filepath.Join(dir, CAKeyFile))
	if err != nil {
		return nil, fmt.Errorf("load job CA: %w", err)
	}
	return ParseCA(cpem, kpem, job)
}

// ParseCA is LoadCA from the files' contents.
func ParseCA(certPEM, keyPEM []byte, job string) (*CA, error) {
	cert, err := parseCert(certPEM)
	if err != nil {
		return nil, fmt.Errorf("job CA certificate: %w", err)
	}
	key, err := parseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("job CA key: %w", err)
	}
	if !cert.IsCA || !key.PublicKey.Equal(cert.PublicKey) {
		return nil, fmt.Errorf("job CA: the key is not the certificate's, or it is no CA")
	}
	if want := "elasticdl job " + job + " CA"; cert.Subject.CommonName != want {
		return nil, fmt.Errorf("job CA is %q, not job %s's", cert.Subject.CommonName, job)
	}
	return &CA{Job: job, Cert: cert, CertPEM: certPEM, key: key}, nil
}

func parseCert(p []byte) (*x509.Certificate, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("no PEM CERTIFICATE block")
	}
	return x509.ParseCertificate(b.Bytes)
}

func parseKey(p []byte) (*ecdsa.PrivateKey, error) {
	b, _ := pem.Decode(p)
	if b == nil || b.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("no PEM PRIVATE KEY block")
	}
	k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
	if err != nil {
		return nil, err
	}
	ek, ok := k.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("key is %T, want ECDSA", k)
	}
	return ek, nil
}

// writeFiles writes files into dir (0700), each 0600, replacing what was
// there.
func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
		if err := os.Rename(tmp, p); err != nil {
			return fmt.Errorf("write %s: %w", p, err)
		}
	}
	return nil
}
