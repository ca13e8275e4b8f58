package tlsid

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"
)

// LocalUserOnly are gRPC transport credentials for a Unix socket both
// ends of which must run as this process's user (SO_PEERCRED): the local
// job's supervisor socket, which launches processes, is in the abstract
// namespace, which any user of the host can reach.
func LocalUserOnly() credentials.TransportCredentials { return localUser{} }

type localUser struct{}

// localInfo is the AuthInfo of a checked Unix-socket peer.
type localInfo struct{ credentials.CommonAuthInfo }

func (localInfo) AuthType() string { return "local-user" }

func (localUser) handshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	if err := checkPeerUID(conn); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, localInfo{credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}, nil
}

func (l localUser) ClientHandshake(_ context.Context, _ string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return l.handshake(conn)
}

func (l localUser) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return l.handshake(conn)
}

func (localUser) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "local-user"}
}

func (l localUser) Clone() credentials.TransportCredentials { return l }

func (localUser) OverrideServerName(string) error { return nil }
