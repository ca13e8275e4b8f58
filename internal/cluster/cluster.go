// Package cluster is the small interface between a job's master and whatever
// runs the job's processes: local child processes (package local) or
// Kubernetes pods (package k8s). Nothing above it knows which.
package cluster

import (
	"context"
	"fmt"

	"elasticdl/internal/tlsid"
)

// Role is what an instance does in the job.
type Role string

// The roles a job's instances play.
const (
	Worker Role = "worker"
	PS     Role = "ps"
)

// InstanceSpec describes one instance to launch.
type InstanceSpec struct {
	Role Role
	// ID is unique per launch within a role: a relaunched worker gets a new ID.
	ID int
	// Index is the stable slot the instance fills (a relaunch keeps it); for
	// a PS it is the shard index.
	Index int
	// Args follow the role's subcommand, e.g. `elasticdl worker <Args>`.
	Args []string
	// Command, when set, is the whole command line instead (a user's own
	// worker program, --worker_command): Command[0] is the program, found
	// on PATH; Args are not used.
	Command []string
	// Env is added to the instance's environment as KEY=VALUE.
	Env []string
	// AvoidNodes are nodes the instance must not be placed on (a
	// Kubernetes required node anti-affinity; one host ignores it).
	AvoidNodes []string
	// TLS, when set, is the instance's certificate, key and the job's CA:
	// the backend puts them where only the instance reads them and names
	// that directory in EnvTLSDir.
	TLS *tlsid.Bundle
}

// EnvTLSDir names the directory of an instance's TLS bundle (package
// tlsid's files). Unset: the job runs without TLS (--tls=false).
const EnvTLSDir = "ELASTICDL_TLS_DIR"

// Name is a readable instance name such as "worker-3".
func (s InstanceSpec) Name() string { return InstanceName(s.Role, s.ID) }

// InstanceName formats a role and ID as the backends name instances.
func InstanceName(r Role, id int) string { return fmt.Sprintf("%s-%d", r, id) }

// Phase is where an instance is in its life.
type Phase int

// The phases an event reports.
const (
	Pending Phase = iota + 1 // accepted, not running yet (e.g. unschedulable pod)
	Running
	Exited // terminated; see ExitCode and Reason
)

func (p Phase) String() string {
	switch p {
	case Pending:
		return "pending"
	case Running:
		return "running"
	case Exited:
		return "exited"
	}
	return fmt.Sprintf("phase(%d)", int(p))
}

// ExitReason classifies how an instance ended.
type ExitReason int

// Exit reasons. Backends map their own signals onto these.
const (
	Completed ExitReason = iota + 1 // exit code 0
	Failed                          // non-zero exit code of its own
	Killed                          // killed by a signal it did not ask for
	Preempted                       // evicted for higher-priority work
	OOMKilled                       // out of memory
	Deleted                         // removed out of band (e.g. kubectl delete)
)

func (r ExitReason) String() string {
	switch r {
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	case Killed:
		return "killed"
	case Preempted:
		return "preempted"
	case OOMKilled:
		return "oom-killed"
	case Deleted:
		return "deleted"
	}
	return fmt.Sprintf("reason(%d)", int(r))
}

// Event reports a change of one instance.
type Event struct {
	Role  Role
	ID    int
	Index int
	Phase Phase
	// For Exited: the exit code (-1 when killed by a signal), the reason,
	// and a human-readable message (signal name, last log line, ...).
	ExitCode int
	Reason   ExitReason
	Message  string
	// Requested is true when the instance ended because Stop was called.
	Requested bool
	// Node is the node it was placed on ("" when unknown or one host).
	Node string
}

// Endpoint is where a PS shard serves: Listen is the address the PS binds,
// Dial the one workers and the master connect to (the same on one host; a
// Service name or another host's address on a cluster).
type Endpoint struct {
	Listen, Dial string
}

// Backend launches and watches a job's instances.
type Backend interface {
	// Launch starts an instance; its progress arrives as Events.
	Launch(ctx context.Context, spec InstanceSpec) error
	// Stop asks an instance to end (SIGTERM, then SIGKILL after a grace
	// period). Its Exited event carries Requested=true.
	Stop(ctx context.Context, role Role, id int) error
	// Events delivers instance events in order per instance. The channel is
	// closed after Close returns.
	Events() <-chan Event
	// Existing returns the job's instances that existed before this
	// backend was made (launched by a master that died), each as its
	// latest event, for the next master to adopt; events after it arrive
	// on Events.
	Existing(ctx context.Context) ([]Event, error)
	// PSAddress is where PS shard index serves, stable across relaunches
	// of that shard.
	PSAddress(index int) (Endpoint, error)
	// Close stops every instance still running and waits for them.
	Close(ctx context.Context) error
}
