// Package ringd is the server of `elasticdl ringd`, the helper process
// through which a Python (PyTorch) worker drives the Go collective ring
// (package collective). It runs in its own process because a collective
// blocked on a frozen peer must be cancellable, and torch's gloo cannot
// abort one: the Go ring can (Ring.Close), from the control socket.
//
// The worker shares a memfd with the helper (the tensors' memory, mapped by
// both) and speaks over two Unix sockets: the data socket carries requests
// served one at a time, in order, each answered once; the control socket is
// served by its own goroutine, so it is answered while a data request is
// blocked in a Form or a collective.
//
// # Frames
//
// Little-endian throughout. A request is u32 n (the bytes that follow),
// u8 op, then the op's fields; a response is u32 n, u8 status, then the
// payload. Status 0 is OK; 1 is ERROR (a bad request or a local failure;
// the payload is the message); 2 is BROKEN (the ring failed, or was closed
// or superseded: the caller forms the next version; the payload is the
// message).
//
// Data socket:
//
//	HELLO=1                          OK: the Listener's address
//	MAP=2 u64 bytes                  (re)map the memfd, bytes long
//	FORM=3 i64 version, u32 rank, u32 timeout_ms, u32 npeers,
//	       npeers × (u16 len, bytes)  form the ring (the live one is closed first)
//	       [npeers × u32 worker_id]   optional: with TLS, each link's peer must prove it
//	ALLREDUCE=4 i64 version, u64 offset, u64 count   (float32 elements of the mapping)
//	BROADCAST=5 i64 version, u32 root, u64 offset, u64 count
//	LEAVE=6                          close and drop the live ring
//	STATS=7                          OK: i64 ops, i64 bytes_sent, i64 busy_ns over every ring
//
// Control socket:
//
//	SUPERSEDE=8 i64 version, u8 close_live
//
// SUPERSEDE cancels a Form of an older version in progress, makes later
// FORMs of older versions fail at once (the poller may see the newer
// version before the trainer asks for the older one), and with close_live
// closes a live ring of an older version, so a collective blocked on it
// answers BROKEN at once.
//
// The helper stops when either socket reaches EOF: the worker exited or
// closed it.
package ringd
