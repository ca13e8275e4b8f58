package ringd

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// op is a request's operation (doc.go lists them with their fields).
type op uint8

const (
	opHello op = 1 + iota
	opMap
	opForm
	opAllReduce
	opBroadcast
	opLeave
	opStats
	opSupersede
)

func (o op) String() string {
	names := [...]string{"", "HELLO", "MAP", "FORM", "ALLREDUCE", "BROADCAST", "LEAVE", "STATS", "SUPERSEDE"}
	if o == 0 || int(o) >= len(names) {
		return fmt.Sprintf("op(%d)", uint8(o))
	}
	return names[o]
}

// status is a response's outcome.
type status uint8

const (
	statusOK     status = 0
	statusError  status = 1 // a bad request or a local failure
	statusBroken status = 2 // the ring failed or is gone: form the next one
)

// maxFrame bounds a frame's length: requests are a few fields and a peer
// list, so a larger length means the stream is out of step, not a request.
const maxFrame = 4 << 20

// request is a decoded request; only its op's fields are set.
type request struct {
	op        op
	version   int64
	rank      uint32 // FORM
	timeout   time.Duration
	peers     []string
	ids       []int  // FORM: the peers' worker IDs, when given
	root      uint32 // BROADCAST
	offset    uint64 // ALLREDUCE, BROADCAST: in float32 elements
	count     uint64
	bytes     uint64 // MAP
	closeLive bool   // SUPERSEDE
}

// readFrame reads one frame's body (what follows its length). A clean end
// of the stream before a frame is io.EOF; one inside a frame is
// io.ErrUnexpectedEOF.
func readFrame(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size == 0 || size > maxFrame {
		return nil, fmt.Errorf("ringd: frame of %d bytes (want 1 to %d): stream out of step", size, maxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return b, nil
}

// writeFrame writes body with its length in one write, so that concurrent
// writers of whole frames could not interleave.
func writeFrame(w io.Writer, body []byte) error {
	b := make([]byte, 4, 4+len(body))
	binary.LittleEndian.PutUint32(b, uint32(len(body)))
	_, err := w.Write(append(b, body...))
	return err
}

// response is the body of a response frame.
func response(st status, payload []byte) []byte {
	return append([]byte{byte(st)}, payload...)
}

// parseResponse splits a response body.
func parseResponse(b []byte) (status, []byte, error) {
	if len(b) == 0 {
		return 0, nil, errors.New("ringd: empty response")
	}
	if st := status(b[0]); st <= statusBroken {
		return st, b[1:], nil
	}
	return 0, nil, fmt.Errorf("ringd: unknown response status %d", b[0])
}

// marshal is the body of q's request frame (the Go side of what the Python
// client writes; the tests drive the server with it).
func (q request) marshal() []byte {
	b := []byte{byte(q.op)}
	le := binary.LittleEndian
	switch q.op {
	case opMap:
		b = le.AppendUint64(b, q.bytes)
	case opForm:
		b = le.AppendUint64(b, uint64(q.version))
		b = le.AppendUint32(b, q.rank)
		b = le.AppendUint32(b, uint32(q.timeout/time.Millisecond))
		b = le.AppendUint32(b, uint32(len(q.peers)))
		for _, p := range q.peers {
			b = le.AppendUint16(b, uint16(len(p)))
			b = append(b, p...)
		}
		for _, id := range q.ids {
			b = le.AppendUint32(b, uint32(id))
		}
	case opAllReduce:
		b = le.AppendUint64(b, uint64(q.version))
		b = le.AppendUint64(b, q.offset)
		b = le.AppendUint64(b, q.count)
	case opBroadcast:
		b = le.AppendUint64(b, uint64(q.version))
		b = le.AppendUint32(b, q.root)
		b = le.AppendUint64(b, q.offset)
		b = le.AppendUint64(b, q.count)
	case opSupersede:
		b = le.AppendUint64(b, uint64(q.version))
		closeLive := byte(0)
		if q.closeLive {
			closeLive = 1
		}
		b = append(b, closeLive)
	}
	return b
}

// parseRequest decodes a request body. Its errors are the caller's
// mistakes: the frame's length is known, so the stream stays in step.
func parseRequest(b []byte) (request, error) {
	if len(b) == 0 {
		return request{}, errors.New("ringd: empty request")
	}
	q := request{op: op(b[0])}
	d := decoder{b: b[1:]}
	switch q.op {
	case opHello, opLeave, opStats:
	case opMap:
		q.bytes = d.u64()
	case opForm:
		q.version = int64(d.u64())
		q.rank = d.u32()
		q.timeout = time.Duration(d.u32()) * time.Millisecond
		q.peers = d.strings(int(d.u32()))
		// The peers' worker IDs follow, or nothing (older clients).
		if len(d.b) > 0 && len(d.b) == 4*len(q.peers) {
			q.ids = make([]int, len(q.peers))
			for i := range q.ids {
				q.ids[i] = int(d.u32())
			}
		}
	case opAllReduce:
		q.version = int64(d.u64())
		q.offset, q.count = d.u64(), d.u64()
	case opBroadcast:
		q.version = int64(d.u64())
		q.root = d.u32()
		q.offset, q.count = d.u64(), d.u64()
	case opSupersede:
		q.version = int64(d.u64())
		q.closeLive = d.u8() != 0
	default:
		return request{}, fmt.Errorf("ringd: unknown operation %d", b[0])
	}
	if d.short {
		return request{}, fmt.Errorf("ringd: %v request of %d bytes is truncated", q.op, len(b))
	}
	if len(d.b) > 0 {
		return request{}, fmt.Errorf("ringd: %v request has %d stray bytes at its end", q.op, len(d.b))
	}
	return q, nil
}

// decoder reads little-endian fields; reading past the end sets short
// and yields zeros.
type decoder struct {
	b     []byte
	short bool
}

func (d *decoder) take(n int) []byte {
	if d.short || len(d.b) < n {
		d.short = true
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u16() uint16 {
	if v := d.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

// strings reads n length-prefixed strings; n is bounded by the bytes left
// (each takes at least 2), so a wild count cannot allocate.
func (d *decoder) strings(n int) []string {
	if n > len(d.b)/2 {
		d.short = true
		return nil
	}
	out := make([]string, 0, n)
	for range n {
		s := d.take(int(d.u16()))
		if d.short {
			return nil
		}
		out = append(out, string(s))
	}
	return out
}
