// Package tlstest makes a job's credentials for tests: the real CA and
// certificates of package tlsid, plus the ones a test must see refused
// (another job's, an expired one).
package tlstest

import (
	"crypto/tls"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"elasticdl/internal/tlsid"
)

// Job is a test job's CA.
type Job struct {
	t  testing.TB
	CA *tlsid.CA
}

// NewJob makes job's CA, valid for a day.
func NewJob(t testing.TB, job string) *Job {
	t.Helper()
	now := time.Now()
	ca, err := tlsid.NewCA(job, now, now.Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return &Job{t: t, CA: ca}
}

// Bundle issues role/id's certificate, valid for the CA's life.
func (j *Job) Bundle(role tlsid.Role, id int) tlsid.Bundle {
	j.t.Helper()
	now := time.Now()
	b, err := j.CA.Issue(tlsid.Identity{Job: j.CA.Job, Role: role, ID: id}, now, now.Add(24*time.Hour))
	if err != nil {
		j.t.Fatal(err)
	}
	return b
}

// Creds are role/id's credentials.
func (j *Job) Creds(role tlsid.Role, id int) *tlsid.Creds {
	j.t.Helper()
	c, err := tlsid.New(j.Bundle(role, id))
	if err != nil {
		j.t.Fatal(err)
	}
	return c
}

// Expired are role/id's credentials whose certificate ended a minute ago:
// a peer must refuse them.
func (j *Job) Expired(role tlsid.Role, id int) *tlsid.Creds {
	j.t.Helper()
	now := time.Now()
	// Valid from an hour ago (the CA's skew) to a minute ago.
	b, err := j.CA.Issue(tlsid.Identity{Job: j.CA.Job, Role: role, ID: id}, now, now.Add(-time.Minute))
	if err != nil {
		j.t.Fatal(err)
	}
	c, err := tlsid.NewAt(b, now.Add(-30*time.Minute))
	if err != nil {
		j.t.Fatal(err)
	}
	return c
}

// Impostor is a gRPC client a server of the job must refuse.
type Impostor struct {
	Name string
	Opt  grpc.DialOption
}

// Impostors are the clients a server of role serve must refuse at the
// handshake (gRPC answers them Unavailable: no connection): plaintext, a
// TLS client with no certificate, a worker of another job's CA (of the
// same name), and a worker whose certificate has expired.
func (j *Job) Impostors(serve tlsid.Role) []Impostor {
	j.t.Helper()
	noCert := credentials.NewTLS(&tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	other := NewJob(j.t, j.CA.Job)
	return []Impostor{
		{"plaintext", tlsid.DialOption(nil)},
		{"no certificate", grpc.WithTransportCredentials(noCert)},
		{"another job's certificate", tlsid.DialOption(other.Creds(tlsid.Worker, 0), serve)},
		{"expired certificate", tlsid.DialOption(j.Expired(tlsid.Worker, 0), serve)},
	}
}
