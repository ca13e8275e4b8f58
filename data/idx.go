package data

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// IDX magic numbers: two zero bytes, type 0x08 (unsigned byte), number of dims.
const (
	idxImagesMagic = 0x00000803
	idxLabelsMagic = 0x00000801
)

// IDX reads an MNIST-style pair of IDX files: an images file (IDX3, unsigned
// bytes, N×rows×cols) and its labels file (IDX1, unsigned bytes, N).
//
// A gzipped images file is decompressed once at open and kept in memory
// (MNIST's 60000×784 bytes is 47 MB); a plain one is read with ReadAt on each
// Read, so it is never loaded whole. Labels are always loaded (N bytes).
// Features are pixel/255 as float32 with shape [rows, cols, 1].
type IDX struct {
	name       string
	labelsPath string
	n          int64
	rows, cols int
	recSize    int64 // rows*cols bytes per image

	inMem   bool
	pix     []byte   // all image bytes, when inMem
	f       *os.File // the plain images file, when !inMem
	dataOff int64    // offset of the first image in f
	labels  []byte

	scale [256]float32 // pixel value -> feature; a table is exact and cheaper than dividing

	mu     sync.RWMutex // Close excludes Read; Reads run concurrently
	closed bool
}

// IDXLabelsPath returns the labels file that goes with an images file by
// the MNIST naming convention: "images-idx3" becomes "labels-idx1" in the
// file name (train-images-idx3-ubyte.gz -> train-labels-idx1-ubyte.gz), in
// the same directory.
func IDXLabelsPath(imagesPath string) (string, error) {
	dir, base := filepath.Split(imagesPath)
	if !strings.Contains(base, "images-idx3") {
		return "", fmt.Errorf(`%s: cannot derive the labels file name: want "images-idx3" in the file name (MNIST convention), or use OpenIDXFiles`, imagesPath)
	}
	return dir + strings.Replace(base, "images-idx3", "labels-idx1", 1), nil
}

// OpenIDX opens an IDX images file and the labels file named after it (see
// IDXLabelsPath). Either file may be gzipped, which is detected from its
// first bytes rather than its name.
func OpenIDX(imagesPath string) (*IDX, error) {
	labelsPath, err := IDXLabelsPath(imagesPath)
	if err != nil {
		return nil, err
	}
	return OpenIDXFiles(imagesPath, labelsPath)
}

// OpenIDXFiles is OpenIDX with an explicit labels file, for files that do not
// follow the MNIST naming convention.
func OpenIDXFiles(imagesPath, labelsPath string) (*IDX, error) {
	img, err := loadIDX(imagesPath, idxImagesMagic, "an IDX3 ubyte images file", false)
	if err != nil {
		return nil, err
	}
	lab, err := loadIDX(labelsPath, idxLabelsMagic, "an IDX1 ubyte labels file", true)
	if err != nil {
		img.close()
		return nil, fmt.Errorf("labels for %s: %w", imagesPath, err)
	}
	if img.count != lab.count {
		img.close()
		return nil, fmt.Errorf("%s has %d images but %s has %d labels", imagesPath, img.count, labelsPath, lab.count)
	}
	x := &IDX{
		name:       imagesPath,
		labelsPath: labelsPath,
		n:          img.count,
		rows:       int(img.dims[1]),
		cols:       int(img.dims[2]),
		recSize:    img.recSize,
		inMem:      img.f == nil,
		pix:        img.data,
		f:          img.f,
		dataOff:    img.dataOff,
		labels:     lab.data,
	}
	for i := range x.scale {
		x.scale[i] = float32(i) / 255
	}
	return x, nil
}

// Name returns the images path the source was opened with.
func (x *IDX) Name() string { return x.name }

// LabelsPath returns the labels file in use.
func (x *IDX) LabelsPath() string { return x.labelsPath }

// Len returns the number of records (images).
func (x *IDX) Len() int64 { return x.n }

// FeatureShape returns [rows, cols, 1].
func (x *IDX) FeatureShape() []int { return []int{x.rows, x.cols, 1} }

// Read decodes images and labels [start,end). IDX records have no per-record
// encoding that could be corrupt, so Batch.Corrupt is always empty.
func (x *IDX) Read(start, end int64) (*Batch, error) {
	if err := checkRange(x.name, start, end, x.n); err != nil {
		return nil, err
	}
	x.mu.RLock()
	defer x.mu.RUnlock()
	if x.closed {
		return nil, fmt.Errorf("%s: read: %w", x.name, os.ErrClosed)
	}
	n := end - start
	var pix []byte
	if x.inMem {
		pix = x.pix[start*x.recSize : end*x.recSize]
	} else {
		pix = make([]byte, n*x.recSize)
		k, err := x.f.ReadAt(pix, x.dataOff+start*x.recSize)
		if k < len(pix) { // a full read may come with io.EOF; only a short one is a problem
			if err == io.EOF {
				err = fmt.Errorf("file is shorter than when opened: %w", io.ErrUnexpectedEOF)
			}
			return nil, &RecordError{Source: x.name, Record: start + int64(k)/x.recSize, Err: fmt.Errorf("read: %w", err)}
		}
	}
	b := &Batch{
		N:            int(n),
		FeatureShape: x.FeatureShape(),
		Features:     make([]float32, len(pix)),
		Labels:       make([]int32, n),
		Index:        make([]int64, n),
	}
	feats := b.Features[:len(pix)] // same length: lets the compiler drop bounds checks
	for i, p := range pix {
		feats[i] = x.scale[p]
	}
	for i, l := range x.labels[start:end] {
		b.Labels[i] = int32(l)
		b.Index[i] = start + int64(i)
	}
	return b, nil
}

// Close releases the file. Reads after Close fail; Close is idempotent.
func (x *IDX) Close() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.closed {
		return nil
	}
	x.closed = true
	x.pix, x.labels = nil, nil
	if x.f != nil {
		if err := x.f.Close(); err != nil {
			return fmt.Errorf("close %s: %w", x.name, err)
		}
	}
	return nil
}

// idxFile is one validated IDX file: either its payload in memory (data) or
// the open file to read it from (f, dataOff).
type idxFile struct {
	dims    []uint32 // dims[0] is the record count
	count   int64
	recSize int64 // bytes per record: product of dims[1:]
	data    []byte
	f       *os.File
	dataOff int64
}

func (p *idxFile) close() {
	if p.f != nil {
		p.f.Close() // only called on an error path; the first error is the one to report
	}
}

// loadIDX opens and validates an IDX file with the given magic. A gzipped file
// is always decompressed into memory; a plain one is too when inMem is set,
// otherwise it is left open for ReadAt.
func loadIDX(path string, magic uint32, kind string, inMem bool) (*idxFile, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err // *PathError: "open <path>: ..."
	}
	var sig [2]byte
	if n, _ := f.ReadAt(sig[:], 0); n == 2 && sig == [2]byte{0x1f, 0x8b} {
		defer f.Close()
		return loadGzipIDX(path, f, magic, kind)
	}
	p, err := loadPlainIDX(path, f, magic, kind, inMem)
	if err != nil || p.f == nil {
		f.Close()
	}
	return p, err
}

func loadPlainIDX(path string, f *os.File, magic uint32, kind string, inMem bool) (*idxFile, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	hdr := make([]byte, 4+4*int(magic&0xff))
	if k, err := f.ReadAt(hdr, 0); k < len(hdr) {
		if err == io.EOF {
			return nil, fmt.Errorf("%s: truncated header: %d of %d bytes", path, k, len(hdr))
		}
		return nil, fmt.Errorf("%s: read header: %w", path, err)
	}
	p, err := parseIDXHeader(path, hdr, magic, kind)
	if err != nil {
		return nil, err
	}
	total := p.count * p.recSize
	if have := st.Size() - int64(len(hdr)); have != total {
		if have < total {
			return nil, truncatedError(path, p, have, nil)
		}
		return nil, fmt.Errorf("%s: %d bytes of trailing data: header says %d records of %d bytes", path, have-total, p.count, p.recSize)
	}
	p.dataOff = int64(len(hdr))
	if !inMem {
		p.f = f
		return p, nil
	}
	p.data = make([]byte, total)
	if k, err := f.ReadAt(p.data, p.dataOff); k < len(p.data) {
		return nil, fmt.Errorf("%s: read: %w", path, err)
	}
	return p, nil
}

func loadGzipIDX(path string, f *os.File, magic uint32, kind string) (*idxFile, error) {
	zr, err := gzip.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("%s: gzip: %w", path, err)
	}
	hdr := make([]byte, 4+4*int(magic&0xff))
	if k, err := io.ReadFull(zr, hdr); err != nil {
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("%s: truncated header: %d of %d bytes: %w", path, k, len(hdr), err)
		}
		return nil, fmt.Errorf("%s: decompress: %w", path, err)
	}
	p, err := parseIDXHeader(path, hdr, magic, kind)
	if err != nil {
		return nil, err
	}
	total := p.count * p.recSize
	p.data, err = readExactly(zr, total)
	if err == nil {
		// Read on to the end of the stream: that is where gzip verifies the
		// checksum and length, and where a cut-off trailer shows.
		var extra [1]byte
		if _, err = io.ReadFull(zr, extra[:]); err == nil {
			return nil, fmt.Errorf("%s: trailing data after %d records of %d bytes", path, p.count, p.recSize)
		}
		if err == io.EOF {
			return p, nil
		}
	}
	switch {
	case int64(len(p.data)) < total && (err == io.EOF || err == io.ErrUnexpectedEOF):
		return nil, truncatedError(path, p, int64(len(p.data)), err)
	case err == io.ErrUnexpectedEOF: // all records are there, the stream's end is not
		return nil, fmt.Errorf("%s: truncated gzip stream after the last record: %w", path, err)
	default:
		return nil, fmt.Errorf("%s: decompress: %w", path, err)
	}
}

// parseIDXHeader checks the magic number and sizes. It rejects sizes that
// overflow, so that later offset arithmetic in int64 (and int) is safe.
func parseIDXHeader(path string, hdr []byte, magic uint32, kind string) (*idxFile, error) {
	if m := binary.BigEndian.Uint32(hdr); m != magic {
		return nil, fmt.Errorf("%s: bad magic 0x%08x (want 0x%08x, %s)", path, m, magic, kind)
	}
	p := &idxFile{dims: make([]uint32, magic&0xff)}
	recSize := uint64(1)
	for i := range p.dims {
		p.dims[i] = binary.BigEndian.Uint32(hdr[4+4*i:])
		if i > 0 {
			if p.dims[i] == 0 {
				return nil, fmt.Errorf("%s: bad dimensions %v: sizes after the count must be > 0", path, p.dims)
			}
			recSize *= uint64(p.dims[i]) // at most two 32-bit factors: cannot overflow
		}
	}
	hi, total := bits.Mul64(uint64(p.dims[0]), recSize)
	if hi != 0 || total > math.MaxInt-uint64(len(hdr)) {
		return nil, fmt.Errorf("%s: header says %d records of %d bytes: too large", path, p.dims[0], recSize)
	}
	p.count, p.recSize = int64(p.dims[0]), int64(recSize)
	return p, nil
}

func truncatedError(path string, p *idxFile, have int64, cause error) error {
	// Rounded down: "59999.999" must not print as a complete 60000.
	holds := strconv.FormatFloat(math.Floor(float64(have)/float64(p.recSize)*1000)/1000, 'f', -1, 64)
	msg := fmt.Sprintf("%s: truncated: header says %d records of %d bytes, file holds %s; record %d is the first incomplete one",
		path, p.count, p.recSize, holds, have/p.recSize)
	if cause != nil {
		return fmt.Errorf("%s: %w", msg, cause)
	}
	return errors.New(msg)
}

// readExactly reads n bytes from r. It grows its buffer as data arrives
// instead of trusting n up front, so a header that claims gigabytes cannot
// make a small (or hostile) file allocate them. On a short read it returns
// what it got with the error (io.EOF if r ended cleanly).
func readExactly(r io.Reader, n int64) ([]byte, error) {
	buf := make([]byte, 0, min(n, 8<<20))
	for int64(len(buf)) < n {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, int(min(n-int64(len(buf)), int64(len(buf)))))
		}
		k, err := r.Read(buf[len(buf):min(int64(cap(buf)), n)])
		buf = buf[:len(buf)+k]
		if err != nil {
			if err == io.EOF && int64(len(buf)) == n {
				break
			}
			return buf, err
		}
	}
	return buf, nil
}
