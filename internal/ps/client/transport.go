package client

import (
	"context"
	"errors"

	"google.golang.org/grpc"

	"elasticdl/internal/ps/direct"
	"elasticdl/proto/pserverpb"
)

// pull sends one pull to the shard; see callShard.
func (s *shardConn) pull(ctx context.Context, req *pserverpb.PullDenseParametersRequest) (*pserverpb.PullDenseParametersResponse, func(), error) {
	return callShard(ctx, s, req, (*direct.Client).Pull, s.rpc.PullDenseParameters)
}

// push sends one push to the shard; see callShard.
func (s *shardConn) push(ctx context.Context, req *pserverpb.PushGradientsRequest) (*pserverpb.PushGradientsResponse, func(), error) {
	return callShard(ctx, s, req, (*direct.Client).Push, s.rpc.PushGradients)
}

// callShard sends req over the shard's direct connection, or over gRPC
// when it has none or its PS does not speak the direct protocol; release
// (never nil) gives the answer's buffers back once decoded.
func callShard[Req, Resp any](ctx context.Context, s *shardConn, req Req,
	viaDirect func(*direct.Client, context.Context, Req) (Resp, func(), error),
	viaGRPC func(context.Context, Req, ...grpc.CallOption) (Resp, error)) (Resp, func(), error) {
	if s.direct != nil {
		resp, release, err := viaDirect(s.direct, ctx, req)
		if !errors.Is(err, direct.ErrUnsupported) {
			if release == nil {
				release = noRelease
			}
			return resp, release, err
		}
	}
	resp, err := viaGRPC(ctx, req)
	return resp, noRelease, err
}

// noRelease is the release of an answer that holds no lent buffer.
func noRelease() {}
