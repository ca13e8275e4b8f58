// Package tlsid holds a job's certificate authority, the identities it
// issues to the job's processes, and the TLS settings every transport
// (gRPC, the PS's direct transport, the collective ring) takes from them.
// A process is known by its certificate alone: elasticdl://JOB/ROLE/ID in a
// URI SAN, issued by the job's own CA, so that a handler trusts what the
// handshake proved rather than what a request claims.
package tlsid

import (
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// Role is what a process is to the job.
type Role string

// The roles the CA issues certificates for. Client is the submitting user
// (the CLI): it may talk to the master but is no worker.
const (
	Master Role = "master"
	Worker Role = "worker"
	PS     Role = "ps"
	Client Role = "client"
)

func (r Role) valid() bool {
	switch r {
	case Master, Worker, PS, Client:
		return true
	}
	return false
}

// Identity is one process of one job.
type Identity struct {
	Job  string
	Role Role
	ID   int
}

const scheme = "elasticdl"

// URI is the identity as a certificate's URI SAN.
func (i Identity) URI() *url.URL {
	return &url.URL{Scheme: scheme, Host: i.Job, Path: "/" + string(i.Role) + "/" + strconv.Itoa(i.ID)}
}

func (i Identity) String() string { return i.URI().String() }

// DNSName is the name every certificate of a role carries, so that a
// client that can only check a host name (grpcio) checks the role.
func (r Role) DNSName() string { return string(r) + ".elasticdl" }

// ParseURI reads an identity from a URI SAN.
func ParseURI(u *url.URL) (Identity, error) {
	if u == nil || u.Scheme != scheme || u.Host == "" {
		return Identity{}, fmt.Errorf("not an elasticdl identity: %v", u)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 2 {
		return Identity{}, fmt.Errorf("identity %v: want elasticdl://JOB/ROLE/ID", u)
	}
	role := Role(parts[0])
	if !role.valid() {
		return Identity{}, fmt.Errorf("identity %v: unknown role %q", u, parts[0])
	}
	id, err := strconv.Atoi(parts[1])
	if err != nil || id < 0 {
		return Identity{}, fmt.Errorf("identity %v: bad ID %q", u, parts[1])
	}
	return Identity{Job: u.Host, Role: role, ID: id}, nil
}

// ErrUnauthenticated is wrapped by every failure to prove an identity.
var ErrUnauthenticated = errors.New("unauthenticated")

// ErrPermissionDenied is wrapped by every refusal of a proven identity.
var ErrPermissionDenied = errors.New("permission denied")
