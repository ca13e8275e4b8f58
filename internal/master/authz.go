package master

import (
	"fmt"
	"time"

	"elasticdl/internal/cluster"
	"elasticdl/internal/tlsid"
	"elasticdl/proto/masterpb"
)

// jobTLS is the job's CA as the master holds it: it issues the master's own
// certificate and one for every instance it launches (nil: --tls=false).
type jobTLS struct {
	ca    *tlsid.CA
	creds *tlsid.Creds
}

// newJobTLS issues the master's own credentials from ca (nil: none).
func newJobTLS(ca *tlsid.CA, now time.Time) (*jobTLS, error) {
	if ca == nil {
		return nil, nil
	}
	b, err := ca.Issue(tlsid.Identity{Job: ca.Job, Role: tlsid.Master}, now, ca.Cert.NotAfter)
	if err != nil {
		return nil, fmt.Errorf("master certificate: %w", err)
	}
	c, err := tlsid.New(b)
	if err != nil {
		return nil, fmt.Errorf("master certificate: %w", err)
	}
	return &jobTLS{ca: ca, creds: c}, nil
}

// Creds are the master's own credentials (nil without TLS).
func (t *jobTLS) Creds() *tlsid.Creds {
	if t == nil {
		return nil
	}
	return t.creds
}

// bundle is what instance role/id is given: its own certificate and key.
func (t *jobTLS) bundle(role cluster.Role, id int, now time.Time) (*tlsid.Bundle, error) {
	if t == nil {
		return nil, nil
	}
	r := tlsid.Worker
	if role == cluster.PS {
		r = tlsid.PS
	}
	b, err := t.ca.Issue(tlsid.Identity{Job: t.ca.Job, Role: r, ID: id}, now, t.ca.Cert.NotAfter)
	if err != nil {
		return nil, fmt.Errorf("certificate of %s: %w", cluster.InstanceName(role, id), err)
	}
	return &b, nil
}

// masterPolicy: only the job's workers call the master, each only as
// itself (every request names its worker).
func masterPolicy() tlsid.Policy {
	table := map[string][]tlsid.Role{}
	for _, m := range masterpb.Master_ServiceDesc.Methods {
		table["/"+masterpb.Master_ServiceDesc.ServiceName+"/"+m.MethodName] = []tlsid.Role{tlsid.Worker}
	}
	return tlsid.Roles(table)
}
