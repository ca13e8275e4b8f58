package collective

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
)

// Connection handshake. The dialing member (rank r) sends a hello to the
// listener of rank r+1; the listener answers with a reply. Integers are
// big-endian (network order); only tensor data is little-endian.
//
//	hello: magic "EDLC" | protocol u32 | version i64 | from u32 | to u32 | world u32 | peers u64
//	reply: status u8 | reason length u16 | reason (UTF-8)
const (
	helloMagic    = "EDLC"
	protocol      = 1
	helloLen      = 4 + 4 + 8 + 4 + 4 + 4 + 8
	maxReasonLen  = 1024
	statusOK      = 0 // the connection is the listener's previous member's link
	statusRetry   = 1 // no ring of that version is forming here yet: dial again
	statusRefused = 2 // never for this ring (stale version, wrong rank, ...)
)

// hello identifies a ring connection.
type hello struct {
	version  int64
	from, to int    // ranks of the dialer and of the member it means to reach
	world    int    // members in the ring
	peers    uint64 // peersHash of the member list
}

func (h hello) marshal() []byte {
	b := make([]byte, 0, helloLen)
	b = append(b, helloMagic...)
	b = binary.BigEndian.AppendUint32(b, protocol)
	b = binary.BigEndian.AppendUint64(b, uint64(h.version))
	b = binary.BigEndian.AppendUint32(b, uint32(h.from))
	b = binary.BigEndian.AppendUint32(b, uint32(h.to))
	b = binary.BigEndian.AppendUint32(b, uint32(h.world))
	return binary.BigEndian.AppendUint64(b, h.peers)
}

func parseHello(b []byte) (hello, error) {
	if string(b[:4]) != helloMagic {
		return hello{}, fmt.Errorf("not a ring connection (magic %q, want %q)", b[:4], helloMagic)
	}
	if p := binary.BigEndian.Uint32(b[4:]); p != protocol {
		return hello{}, fmt.Errorf("protocol %d, this member speaks %d", p, protocol)
	}
	return hello{
		version: int64(binary.BigEndian.Uint64(b[8:])),
		from:    int(binary.BigEndian.Uint32(b[16:])),
		to:      int(binary.BigEndian.Uint32(b[20:])),
		world:   int(binary.BigEndian.Uint32(b[24:])),
		peers:   binary.BigEndian.Uint64(b[28:]),
	}, nil
}

// peersHash fingerprints a member list, so that two members given different
// lists under the same version refuse each other.
func peersHash(peers []string) uint64 {
	h := fnv.New64a()
	for _, p := range peers {
		_, _ = io.WriteString(h, p)
		_, _ = h.Write([]byte{0})
	}
	return h.Sum64()
}

func writeReply(w io.Writer, status byte, reason string) error {
	if len(reason) > maxReasonLen {
		reason = reason[:maxReasonLen]
	}
	b := make([]byte, 0, 3+len(reason))
	b = append(b, status)
	b = binary.BigEndian.AppendUint16(b, uint16(len(reason)))
	b = append(b, reason...)
	_, err := w.Write(b)
	return err
}

func readReply(r io.Reader) (status byte, reason string, err error) {
	var h [3]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, "", err
	}
	n := binary.BigEndian.Uint16(h[1:])
	if n > maxReasonLen {
		return 0, "", fmt.Errorf("reply reason of %d bytes (at most %d)", n, maxReasonLen)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return 0, "", err
	}
	if h[0] > statusRefused {
		return 0, "", fmt.Errorf("unknown reply status %d", h[0])
	}
	return h[0], string(b), nil
}

// Every collective starts with a header on every link, so that members that
// are out of step (a different operation, element count, root or sequence
// number) fail with an error instead of exchanging garbage.
//
//	header: op u8 | 3 zero bytes | root u32 | seq u64 | count u64
const headerLen = 24

type opKind uint8

const (
	opAllReduce opKind = 1
	opBroadcast opKind = 2
)

func (o opKind) String() string {
	switch o {
	case opAllReduce:
		return "allreduce"
	case opBroadcast:
		return "broadcast"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

type header struct {
	op    opKind
	root  int
	seq   uint64
	count int
}

func (h header) String() string {
	s := fmt.Sprintf("%s #%d of %d floats", h.op, h.seq, h.count)
	if h.op == opBroadcast {
		s += fmt.Sprintf(" from rank %d", h.root)
	}
	return s
}

func (h header) put(b *[headerLen]byte) {
	*b = [headerLen]byte{}
	b[0] = byte(h.op)
	binary.BigEndian.PutUint32(b[4:], uint32(h.root))
	binary.BigEndian.PutUint64(b[8:], h.seq)
	binary.BigEndian.PutUint64(b[16:], uint64(h.count))
}

var errBadHeader = errors.New("malformed collective header")

func parseHeader(b *[headerLen]byte) (header, error) {
	if b[1] != 0 || b[2] != 0 || b[3] != 0 {
		return header{}, errBadHeader
	}
	return header{
		op:    opKind(b[0]),
		root:  int(binary.BigEndian.Uint32(b[4:])),
		seq:   binary.BigEndian.Uint64(b[8:]),
		count: int(binary.BigEndian.Uint64(b[16:])),
	}, nil
}
