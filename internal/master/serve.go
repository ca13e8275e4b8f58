package master

import (
	"errors"
	"fmt"
	"net"
	"runtime"

	"google.golang.org/grpc"

	"elasticdl/internal/rpc"
	"elasticdl/internal/tlsid"
	"elasticdl/proto/masterpb"
)

func (m *Master) listen() (net.Listener, error) {
	if m.listener != nil {
		return m.listener, nil
	}
	lis, err := net.Listen("tcp", m.cfg.ListenAddr)
	if err != nil {
		return nil, fmt.Errorf("master listen on %s: %w", m.cfg.ListenAddr, err)
	}
	return lis, nil
}

func (m *Master) serve(lis net.Listener) *grpc.Server {
	// A few long-lived goroutines serve the calls instead of a new one
	// per call (each grew its stack again: ~5% of the master's CPU with a
	// thousand workers, BenchmarkMasterScale); when all are busy, gRPC
	// serves a call on a goroutine of its own, as without the option.
	opts := append(rpc.ServerOptions(), grpc.NumStreamWorkers(uint32(runtime.GOMAXPROCS(0))))
	opts = append(opts, tlsid.ServerOptions(m.routes.tls.Creds(), masterPolicy(), m.log)...)
	gs := grpc.NewServer(opts...)
	masterpb.RegisterMasterServer(gs, m)
	go func() {
		if err := gs.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			m.log.Error("master gRPC server", "err", err)
		}
	}()
	return gs
}
