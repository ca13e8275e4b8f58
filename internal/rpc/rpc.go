// Package rpc holds the gRPC settings every elasticdl server (master, PS)
// and client (workers, the master's PS client) share, so that both sides
// of a connection agree on them. It is a leaf: no server code.
package rpc

import (
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"

	"elasticdl/internal/tlsid"
)

// MaxMessageSize bounds gRPC messages in both directions: a whole shard of
// a large model travels in one message.
const MaxMessageSize = 256 << 20

// ServerOptions are the options of every elasticdl gRPC server: large
// messages, and a keepalive policy that tolerates the clients' pings.
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageSize),
		grpc.MaxSendMsgSize(MaxMessageSize),
		// Clients ping every 30s to notice dead peers; the default policy
		// (5 min) would answer that with GOAWAY "too_many_pings".
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
	}
}

// DialOptions are the options of every elasticdl gRPC client: mutual TLS
// with creds to a server of one of the roles accept (plaintext when creds
// is nil: a job run with --tls=false).
func DialOptions(creds *tlsid.Creds, accept ...tlsid.Role) []grpc.DialOption {
	return []grpc.DialOption{
		tlsid.DialOption(creds, accept...),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageSize), grpc.MaxCallSendMsgSize(MaxMessageSize)),
		// Notice a peer that vanished without closing the connection (pod
		// deleted, node lost) within ~40s; the servers permit this rate.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		// gRPC's default reconnect backoff grows to 2 minutes; a relaunched
		// PS (or a master back from a restart) should be picked up within
		// about a second.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
	}
}
