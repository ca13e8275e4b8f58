// Package tfevents writes and reads TensorBoard event files
// (events.out.tfevents.*), so that the master's scalars — loss, evaluation
// metrics, throughput, instance counts — can be plotted by `tensorboard
// --logdir` without TensorFlow: TFRecord framing with masked CRC-32C around
// tensorflow.Event protos, encoded by hand with protowire.
package tfevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// maskDelta is TFRecord's CRC mask constant: a CRC of data that holds
// CRCs is masked so that it is not a CRC of those bytes itself.
const maskDelta = 0xa282ead8

// MaskedCRC is TFRecord's masked CRC-32C of b.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return ((c >> 15) | (c << 17)) + maskDelta
}

// headerLen and footerLen frame a record: length, its CRC; data's CRC.
const (
	headerLen = 8 + 4
	footerLen = 4
)

// AppendRecord appends data framed as one TFRecord: uint64 length (little
// endian), masked CRC of those 8 bytes, data, masked CRC of data.
func AppendRecord(dst, data []byte) []byte {
	var h [headerLen]byte
	binary.LittleEndian.PutUint64(h[:8], uint64(len(data)))
	binary.LittleEndian.PutUint32(h[8:], MaskedCRC(h[:8]))
	dst = append(dst, h[:]...)
	dst = append(dst, data...)
	return binary.LittleEndian.AppendUint32(dst, MaskedCRC(data))
}

// maxRecord bounds a record's length: a corrupt length must not make the
// reader allocate gigabytes (the length's CRC catches most, not all).
const maxRecord = 256 << 20

// ErrCorrupt is wrapped by every framing error: a bad CRC, an impossible
// length, a record cut short.
var ErrCorrupt = errors.New("corrupt TFRecord")

// RecordReader reads TFRecords and checks both CRCs of each.
type RecordReader struct {
	r   io.Reader
	off int64 // where the next record starts
}

// NewRecordReader reads records from r.
func NewRecordReader(r io.Reader) *RecordReader { return &RecordReader{r: r} }

// Offset is where the next record starts, in bytes from the start.
func (rr *RecordReader) Offset() int64 { return rr.off }

// Next returns the next record's data; io.EOF at a clean end of input. A
// file cut inside a record (a writer still writing, or killed) is an error
// wrapping ErrCorrupt and io.ErrUnexpectedEOF, naming the offset.
func (rr *RecordReader) Next() ([]byte, error) {
	var h [headerLen]byte
	if n, err := io.ReadFull(rr.r, h[:]); err != nil {
		if err == io.EOF && n == 0 {
			return nil, io.EOF
		}
		return nil, rr.fail(err, "header")
	}
	n := binary.LittleEndian.Uint64(h[:8])
	if got, want := MaskedCRC(h[:8]), binary.LittleEndian.Uint32(h[8:]); got != want {
		return nil, fmt.Errorf("%w at offset %d: length CRC is %#08x, computed %#08x", ErrCorrupt, rr.off, want, got)
	}
	if n > maxRecord {
		return nil, fmt.Errorf("%w at offset %d: length %d over %d", ErrCorrupt, rr.off, n, maxRecord)
	}
	buf := make([]byte, int(n)+footerLen)
	if _, err := io.ReadFull(rr.r, buf); err != nil {
		return nil, rr.fail(err, "data")
	}
	data, crc := buf[:n], binary.LittleEndian.Uint32(buf[n:])
	if got := MaskedCRC(data); got != crc {
		return nil, fmt.Errorf("%w at offset %d: data CRC is %#08x, computed %#08x", ErrCorrupt, rr.off, crc, got)
	}
	rr.off += headerLen + int64(n) + footerLen
	return data, nil
}

// fail wraps a read error inside a record.
func (rr *RecordReader) fail(err error, part string) error {
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w at offset %d: record %s cut short: %w", ErrCorrupt, rr.off, part, err)
	}
	return fmt.Errorf("reading record %s at offset %d: %w", part, rr.off, err)
}
