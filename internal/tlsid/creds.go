package tlsid

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Bundle is what one process holds: the job's CA certificate, its own
// certificate and its key, PEM-encoded.
type Bundle struct {
	CA, Cert, Key []byte
}

// Write writes the bundle into dir (0700), each file 0600.
func (b Bundle) Write(dir string) error {
	return writeFiles(dir, map[string][]byte{CACertFile: b.CA, CertFile: b.Cert, KeyFile: b.Key})
}

// LoadBundle reads what Write wrote.
func LoadBundle(dir string) (Bundle, error) {
	var b Bundle
	for name, dst := range map[string]*[]byte{CACertFile: &b.CA, CertFile: &b.Cert, KeyFile: &b.Key} {
		p, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return Bundle{}, fmt.Errorf("load TLS credentials: %w", err)
		}
		*dst = p
	}
	return b, nil
}

// Creds are a process's credentials: its certificate and the job's CA,
// from which it proves who it is and checks who its peers are. A nil
// *Creds means a job run with --tls=false: every transport is plaintext.
type Creds struct {
	self Identity
	cert tls.Certificate
	pool *x509.CertPool
	// now is the clock certificates are checked against (tests move it).
	now func() time.Time
	// refusals, when set, logs the certificates a server refuses.
	refusals *Refusals
}

// New parses a bundle. The certificate must be the CA's, for an
// elasticdl identity, and valid now.
func New(b Bundle) (*Creds, error) { return NewAt(b, time.Now()) }

// NewAt is New with the own certificate checked at at (tests load an
// expired one this way); peers are checked at the time of each handshake.
func NewAt(b Bundle, at time.Time) (*Creds, error) {
	cert, err := tls.X509KeyPair(b.Cert, b.Key)
	if err != nil {
		return nil, fmt.Errorf("TLS credentials: %w", err)
	}
	ca, err := parseCert(b.CA)
	if err != nil {
		return nil, fmt.Errorf("TLS credentials: job CA: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	c := &Creds{cert: cert, pool: pool, now: func() time.Time { return at }}
	id, err := c.verify(cert.Certificate)
	if err != nil {
		return nil, fmt.Errorf("TLS credentials: own certificate: %w", err)
	}
	c.self, c.now = id, time.Now
	return c, nil
}

// Load is New of the bundle in dir.
func Load(dir string) (*Creds, error) {
	b, err := LoadBundle(dir)
	if err != nil {
		return nil, err
	}
	c, err := New(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	return c, nil
}

// Self is the identity these credentials prove.
func (c *Creds) Self() Identity { return c.self }

// WithClock returns a copy that checks peers' certificates at now()
// (tests of expired certificates).
func (c *Creds) WithClock(now func() time.Time) *Creds {
	cp := *c
	cp.now = now
	return &cp
}

// LogRefusals returns a copy whose servers log each certificate they
// refuse (once per certificate and reason) to log.
func (c *Creds) LogRefusals(log *slog.Logger) *Creds {
	cp := *c
	cp.refusals = NewRefusals(log)
	return &cp
}

// verify checks a peer's chain against the job's CA at c.now and returns
// the identity it proves.
func (c *Creds) verify(raw [][]byte) (Identity, error) {
	if len(raw) == 0 {
		return Identity{}, fmt.Errorf("%w: no certificate", ErrUnauthenticated)
	}
	leaf, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	inter := x509.NewCertPool()
	for _, r := range raw[1:] {
		if ic, err := x509.ParseCertificate(r); err == nil {
			inter.AddCert(ic)
		}
	}
	opts := x509.VerifyOptions{Roots: c.pool, Intermediates: inter, CurrentTime: c.now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}
	if _, err := leaf.Verify(opts); err != nil {
		return Identity{}, fmt.Errorf("%w: %s: %v", ErrUnauthenticated, leaf.Subject.CommonName, err)
	}
	return leafIdentity(leaf, c.self.Job)
}

// leafIdentity reads a verified leaf's identity; job, when set, is the
// only one accepted.
func leafIdentity(leaf *x509.Certificate, job string) (Identity, error) {
	if len(leaf.URIs) != 1 {
		return Identity{}, fmt.Errorf("%w: certificate %q carries %d URI SANs, want 1", ErrUnauthenticated, leaf.Subject.CommonName, len(leaf.URIs))
	}
	id, err := ParseURI(leaf.URIs[0])
	if err != nil {
		return Identity{}, fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if job != "" && id.Job != job {
		return Identity{}, fmt.Errorf("%w: %s is not of job %s", ErrUnauthenticated, id, job)
	}
	return id, nil
}

// ServerConfig is the TLS 1.3 configuration of a server: it demands a
// certificate of the job's CA from every client.
func (c *Creds) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.cert},
		ClientAuth:   tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			_, err := c.verify(raw)
			if err != nil && c.refusals != nil {
				c.refusals.Log(describe(raw), "TLS handshake", err)
			}
			return err
		},
	}
}

// ClientConfig is the TLS 1.3 configuration of a client that will only
// talk to a server of one of the roles accept. Host names are not
// checked: pods move, and the job's CA and the role are what matter.
func (c *Creds) ClientConfig(accept ...Role) *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		Certificates:       []tls.Certificate{c.cert},
		InsecureSkipVerify: true, // verified below, against the job's CA
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			id, err := c.verify(raw)
			if err != nil {
				return err
			}
			if len(accept) > 0 && !slices.Contains(accept, id.Role) {
				return fmt.Errorf("%w: server %s is no %v", ErrPermissionDenied, id, accept)
			}
			return nil
		},
	}
}

// describe names a presented certificate for a log line: its identity
// if it claims one, else its subject.
func describe(raw [][]byte) string {
	if len(raw) == 0 {
		return "a peer with no certificate"
	}
	leaf, err := x509.ParseCertificate(raw[0])
	if err != nil {
		return "a peer with an unreadable certificate"
	}
	serial := fmt.Sprintf("serial %.12x", leaf.SerialNumber)
	if len(leaf.URIs) > 0 {
		return leaf.URIs[0].String() + " (" + serial + ", issuer " + leaf.Issuer.CommonName + ")"
	}
	return leaf.Subject.String() + " (" + serial + ")"
}

// PeerIdentity is the identity of the peer of a completed handshake (the
// configurations above verified it).
func PeerIdentity(cs tls.ConnectionState) (Identity, error) {
	if len(cs.PeerCertificates) == 0 {
		return Identity{}, fmt.Errorf("%w: peer sent no certificate", ErrUnauthenticated)
	}
	return leafIdentity(cs.PeerCertificates[0], "")
}
