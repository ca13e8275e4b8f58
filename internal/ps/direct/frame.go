// Package direct carries a parameter server's two per-step calls — push
// gradients, pull dense parameters — over a plain TCP stream on the PS's
// gRPC port, instead of gRPC. The messages are the same protobuf messages
// and the PS answers them with the same methods; only the dense tensors'
// contents travel outside the protobuf encoding: written straight from the
// caller's buffers (one writev a message) and read straight into pooled
// buffers. gRPC copies every byte of a tensor five times a direction (into
// the tensor, the marshaled message, the HTTP/2 write buffer, the received
// frames, the unmarshaled message) and cuts it into 16 KiB frames; this
// keeps the kernel's copy and one more.
//
// A connection opens with Preface, which a PS answers with the same bytes;
// gRPC's connections (whose HTTP/2 preface differs) go on to the gRPC
// server on the same port (Mux). Then each request is answered in order,
// one at a time; a client keeps a few connections to a shard for calls in
// parallel. Errors travel as gRPC statuses, so callers handle both
// transports alike.
//
// With credentials (NewMuxTLS, NewClientTLS) every connection opens with
// a mutual TLS 1.3 handshake (tls.go), and each call is authorized
// against the client's proven identity. On TCP the frames then travel in
// TLS records. On the local Unix socket (ServeLocal), once the handshake
// has proven both sides and SO_PEERCRED our user at the other end, the
// connection goes on in plaintext on the socket itself
// (tlsid.SwitchRaw): the kernel already keeps its bytes from other users,
// and sealing each byte cut that path's throughput 3-4x. The shared
// region's fd and the frames then share the raw socket.
package direct

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/proto"

	"elasticdl/internal/rpc"
	"elasticdl/proto/pserverpb"
)

// Preface opens every direct connection, from the client; the server
// answers with it too, then its hello. Its first bytes differ from
// HTTP/2's "PRI * HTTP/2.0". Its version changes with the protocol: a
// peer of another version sees what gRPC makes of it, and the client
// falls back to gRPC (version 2: local connections lend a shared region).
const Preface = "EDLDIR2\n"

// maxLocalName bounds the local socket name in a hello (a Unix socket
// path holds 107 bytes).
const maxLocalName = 107

// appendHello appends the server's answer to the preface: the preface,
// then the length (1 byte) and name of its local socket ("" for none).
func appendHello(b []byte, localName string) []byte {
	b = append(b, Preface...)
	b = append(b, byte(len(localName)))
	return append(b, localName...)
}

// kind says what a frame carries.
type kind uint8

const (
	kindPush kind = 1 // PushGradientsRequest
	kindPull kind = 2 // PullDenseParametersRequest
	// kindReply|k answers a request of kind k.
	kindReply kind = 0x80
	// kindError answers any request with a google.rpc.Status.
	kindError kind = 0xff
)

const (
	// fixedLen: kind (1), flags (1), 2 bytes zero, the protobuf header's length
	// (uint32), the number of out-of-band contents (uint32).
	fixedLen = 12
	// maxContents bounds a frame's out-of-band tensors.
	maxContents = 1 << 20
)

// errProtocol is a peer that broke the framing: the connection is closed.
var errProtocol = errors.New("direct: protocol error")

// framer reads and writes frames on one connection, reusing its buffers.
// The contents a read returns are in a buffer lent by pool until
// releaseRecv, so that a connection between calls holds none.
type framer struct {
	conn net.Conn
	r    *bufio.Reader
	pool *bufferPool
	out  []byte   // fixed part, lengths and protobuf header of a write
	bufs [][]byte // a write's out followed by its contents
	in   []byte   // fixed part, lengths and protobuf header of a read
	recv *[]byte  // a read's contents, back to back; nil when none is lent
	got  [][]byte // a read's contents, slices of *recv or shared
	// shared is the connection's shared memory region (shm.go), nil
	// when it has none.
	shared []byte
	// lastContents is the size of the last read's contents.
	lastContents int
}

func newFramer(conn net.Conn, pool *bufferPool) *framer {
	return &framer{conn: conn, r: bufio.NewReaderSize(conn, 64<<10), pool: pool}
}

// releaseRecv gives the last read's contents buffer back.
func (f *framer) releaseRecv() {
	if f.recv != nil {
		f.pool.put(f.recv)
		f.recv = nil
	}
}

// bufferPool lends the buffers contents are read into: memory follows the
// calls in flight, not the connections (a PS may have hundreds).
type bufferPool struct{ p sync.Pool }

// get returns a buffer of n bytes.
func (bp *bufferPool) get(n int) *[]byte {
	b, _ := bp.p.Get().(*[]byte)
	if b == nil || cap(*b) < n {
		// A smaller one is dropped: the pool converges on the largest.
		b = new([]byte)
		*b = make([]byte, n, n+n/4)
	}
	*b = (*b)[:n]
	return b
}

func (bp *bufferPool) put(b *[]byte) { bp.p.Put(b) }

// write sends m with the contents of tensors (tensors of m) out of band.
// The tensors' Content is cleared while m is marshaled and put back.
func (f *framer) write(k kind, m proto.Message, tensors []*pserverpb.Tensor) error {
	if len(tensors) > maxContents {
		return fmt.Errorf("direct: %d tensors in one message (at most %d)", len(tensors), maxContents)
	}
	f.bufs = f.bufs[:0]
	f.out = grow(f.out, fixedLen+8*len(tensors))
	f.out[1], f.out[2], f.out[3] = 0, 0, 0
	total := 0
	for i, t := range tensors {
		c := t.GetContent()
		binary.LittleEndian.PutUint64(f.out[fixedLen+8*i:], uint64(len(c)))
		total += len(c)
		f.bufs = append(f.bufs, c)
		t.Content = nil
	}
	var err error
	f.out, err = proto.MarshalOptions{}.MarshalAppend(f.out, m)
	for i, t := range tensors {
		t.Content = f.bufs[i]
	}
	if err != nil {
		return fmt.Errorf("direct: marshal %T: %w", m, err)
	}
	hdr := len(f.out) - fixedLen - 8*len(tensors)
	if hdr > rpc.MaxMessageSize || total > rpc.MaxMessageSize {
		return fmt.Errorf("direct: %T of %d + %d bytes exceeds %d", m, hdr, total, rpc.MaxMessageSize)
	}
	f.out[0] = byte(k)
	binary.LittleEndian.PutUint32(f.out[4:], uint32(hdr))
	binary.LittleEndian.PutUint32(f.out[8:], uint32(len(tensors)))
	defer clear(f.bufs) // do not keep the caller's buffers alive
	if total > 0 && total <= len(f.shared) {
		switch placement(f.bufs, f.shared) {
		case inPlace: // encoded into the region by the caller
		case outside:
			off := 0
			for _, c := range f.bufs {
				off += copy(f.shared[off:], c)
			}
		case misplaced:
			// Copying could overwrite contents not yet copied: send them
			// on the socket instead.
			goto socket
		}
		f.out[1] = flagShared
		_, err = f.conn.Write(f.out)
		return err
	}
socket:
	bufs := make(net.Buffers, 0, len(f.bufs)+1)
	bufs = append(bufs, f.out)
	for _, c := range f.bufs {
		if len(c) > 0 {
			bufs = append(bufs, c)
		}
	}
	_, err = bufs.WriteTo(f.conn)
	return err
}

// where says where a frame's contents lie relative to a shared region.
type where int

const (
	inPlace   where = iota // back to back from the region's start
	outside                // none in the region
	misplaced              // some in the region, not all in place
)

// placement says where contents lie relative to region.
func placement(contents [][]byte, region []byte) where {
	if len(region) == 0 {
		return outside
	}
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(region)))
	hi := lo + uintptr(len(region))
	in, all := false, true
	off := 0
	for _, c := range contents {
		if len(c) == 0 {
			continue
		}
		p := uintptr(unsafe.Pointer(unsafe.SliceData(c)))
		if p < hi && p+uintptr(len(c)) > lo {
			in = true
		}
		if p != lo+uintptr(off) {
			all = false
		}
		off += len(c)
	}
	switch {
	case !in:
		return outside
	case all:
		return inPlace
	}
	return misplaced
}

// read receives a frame: its kind, protobuf header and contents (which
// alias the framer's buffer until the next read). An io.EOF before the
// frame's first byte is returned as is.
func (f *framer) read() (k kind, hdr []byte, contents [][]byte, err error) {
	f.in = grow(f.in, fixedLen)
	if _, err := io.ReadFull(f.r, f.in); err != nil {
		return 0, nil, nil, err
	}
	k = kind(f.in[0])
	flags := f.in[1]
	hdrLen := binary.LittleEndian.Uint32(f.in[4:])
	n := binary.LittleEndian.Uint32(f.in[8:])
	if flags&^flagShared != 0 || f.in[2]|f.in[3] != 0 || hdrLen > rpc.MaxMessageSize || n > maxContents {
		return 0, nil, nil, fmt.Errorf("%w: frame header %x", errProtocol, f.in)
	}
	f.in = grow(f.in, 8*int(n)+int(hdrLen))
	if _, err := io.ReadFull(f.r, f.in); err != nil {
		return 0, nil, nil, unexpected(err)
	}
	total := uint64(0)
	for i := range int(n) {
		total += binary.LittleEndian.Uint64(f.in[8*i:])
		if total > rpc.MaxMessageSize {
			return 0, nil, nil, fmt.Errorf("%w: contents of more than %d bytes", errProtocol, rpc.MaxMessageSize)
		}
	}
	f.lastContents = int(total)
	var recv []byte
	switch {
	case flags&flagShared != 0:
		if total > uint64(len(f.shared)) {
			return 0, nil, nil, fmt.Errorf("%w: %d bytes of contents in a shared region of %d", errProtocol, total, len(f.shared))
		}
		recv = f.shared
	case total > 0:
		f.releaseRecv()
		f.recv = f.pool.get(int(total))
		recv = *f.recv
		if _, err := io.ReadFull(f.r, recv); err != nil {
			return 0, nil, nil, unexpected(err)
		}
	}
	f.got = f.got[:0]
	off := 0
	for i := range int(n) {
		l := int(binary.LittleEndian.Uint64(f.in[8*i:]))
		f.got = append(f.got, recv[off:off+l:off+l])
		off += l
	}
	return k, f.in[8*n:], f.got, nil
}

// attach gives tensors their contents, in order.
func attach(tensors []*pserverpb.Tensor, contents [][]byte) error {
	if len(tensors) != len(contents) {
		return fmt.Errorf("%w: %d tensors, %d contents", errProtocol, len(tensors), len(contents))
	}
	for i, t := range tensors {
		if len(t.Content) != 0 {
			return fmt.Errorf("%w: tensor %q has its content inline", errProtocol, t.GetName())
		}
		t.Content = contents[i]
	}
	return nil
}

// grow returns b resized to n, reallocated only when too small.
func grow(b []byte, n int) []byte {
	if cap(b) < n {
		return make([]byte, n, n+n/4)
	}
	return b[:n]
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
