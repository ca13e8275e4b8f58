// Package wire converts dense float32 tensors to and from the protobuf
// pserverpb.Tensor used between workers and parameter servers: the content
// is raw little-endian float32 bytes and the shape travels as dims.
//
// On little-endian hosts (all the ones we run on) encoding and decoding are
// a single memory copy; big-endian hosts fall back to encoding/binary so the
// wire format stays the same everywhere.
package wire
