package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// idxBytes encodes an IDX file: magic, big-endian dims, payload.
func idxBytes(magic uint32, dims []uint32, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, magic)
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, d)
	}
	return append(b, payload...)
}

func gzipBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeFile(t testing.TB, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// mnist is a synthetic MNIST-style data set with a known content.
type mnist struct {
	n, rows, cols int
	pix, labels   []byte
}

func newMNIST(n, rows, cols int) *mnist {
	m := &mnist{n: n, rows: rows, cols: cols, pix: make([]byte, n*rows*cols), labels: make([]byte, n)}
	for i := range m.pix {
		m.pix[i] = byte(i*7 + i/13) // covers all 256 values, no period matching a record
	}
	for i := range m.labels {
		m.labels[i] = byte(i*3) % 10
	}
	return m
}

func (m *mnist) images() []byte {
	return idxBytes(idxImagesMagic, []uint32{uint32(m.n), uint32(m.rows), uint32(m.cols)}, m.pix)
}

func (m *mnist) labelsFile() []byte {
	return idxBytes(idxLabelsMagic, []uint32{uint32(m.n)}, m.labels)
}

// write stores the pair in dir under MNIST names and returns the images path.
func (m *mnist) write(t testing.TB, dir string, gz bool) string {
	t.Helper()
	img, lab := m.images(), m.labelsFile()
	suffix := ""
	if gz {
		img, lab, suffix = gzipBytes(t, img), gzipBytes(t, lab), ".gz"
	}
	path := filepath.Join(dir, "train-images-idx3-ubyte"+suffix)
	writeFile(t, path, img)
	writeFile(t, filepath.Join(dir, "train-labels-idx1-ubyte"+suffix), lab)
	return path
}

// diff reports how b differs from records [start,end) of m, or nil.
func (m *mnist) diff(b *Batch, start, end int64) error {
	n := int(end - start)
	rs := m.rows * m.cols
	if b.N != n || len(b.Labels) != n || len(b.Index) != n || len(b.Features) != n*rs || len(b.Corrupt) != 0 {
		return fmt.Errorf("[%d,%d): N=%d labels=%d index=%d features=%d corrupt=%d", start, end,
			b.N, len(b.Labels), len(b.Index), len(b.Features), len(b.Corrupt))
	}
	if !slices.Equal(b.FeatureShape, []int{m.rows, m.cols, 1}) {
		return fmt.Errorf("FeatureShape %v", b.FeatureShape)
	}
	for i := range n {
		rec := start + int64(i)
		if b.Index[i] != rec || b.Labels[i] != int32(m.labels[rec]) {
			return fmt.Errorf("[%d,%d) #%d: index %d label %d, want %d, %d", start, end, i, b.Index[i], b.Labels[i], rec, m.labels[rec])
		}
		for j := range rs {
			if got, want := b.Features[i*rs+j], float32(m.pix[int(rec)*rs+j])/255; got != want {
				return fmt.Errorf("record %d pixel %d: %v, want %v", rec, j, got, want)
			}
		}
	}
	return nil
}

func (m *mnist) check(t *testing.T, b *Batch, start, end int64) {
	t.Helper()
	if err := m.diff(b, start, end); err != nil {
		t.Fatal(err)
	}
}

func forPlainAndGzip(t *testing.T, f func(t *testing.T, gz bool)) {
	for _, gz := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "gzip"}[gz], func(t *testing.T) { f(t, gz) })
	}
}

func TestIDXDecode(t *testing.T) {
	forPlainAndGzip(t, func(t *testing.T, gz bool) {
		m := newMNIST(7, 3, 2)
		path := m.write(t, t.TempDir(), gz)
		x, err := OpenIDX(path)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		if x.Name() != path || x.Len() != 7 || !slices.Equal(x.FeatureShape(), []int{3, 2, 1}) {
			t.Fatalf("Name %q Len %d shape %v", x.Name(), x.Len(), x.FeatureShape())
		}
		if want := strings.Replace(path, "images-idx3", "labels-idx1", 1); x.LabelsPath() != want {
			t.Fatalf("LabelsPath %q, want %q", x.LabelsPath(), want)
		}
		for _, r := range [][2]int64{{0, 7}, {1, 4}, {6, 7}, {3, 3}, {7, 7}} {
			b, err := x.Read(r[0], r[1])
			if err != nil {
				t.Fatal(err)
			}
			m.check(t, b, r[0], r[1])
		}
		// Spot-check the scaling itself, not only agreement with the helper.
		b, _ := x.Read(0, 1)
		if b.Features[0] != float32(m.pix[0])/255 || float32(m.pix[0])/255 > 1 {
			t.Fatalf("feature 0 = %v for pixel %d", b.Features[0], m.pix[0])
		}
	})
}

// The gzip decision must come from the content: files are often renamed.
func TestIDXGzipDetectedByContent(t *testing.T) {
	m := newMNIST(3, 2, 2)
	dir := t.TempDir()
	imgs := filepath.Join(dir, "x-images-idx3-ubyte") // gzip content, no .gz
	writeFile(t, imgs, gzipBytes(t, m.images()))
	writeFile(t, filepath.Join(dir, "x-labels-idx1-ubyte"), m.labelsFile())
	x, err := OpenIDX(imgs)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	b, err := x.Read(0, 3)
	if err != nil {
		t.Fatal(err)
	}
	m.check(t, b, 0, 3)

	imgs = filepath.Join(dir, "y-images-idx3-ubyte.gz") // plain content, .gz name
	writeFile(t, imgs, m.images())
	writeFile(t, filepath.Join(dir, "y-labels-idx1-ubyte.gz"), gzipBytes(t, m.labelsFile()))
	y, err := OpenIDX(imgs)
	if err != nil {
		t.Fatal(err)
	}
	defer y.Close()
	if b, err = y.Read(1, 3); err != nil {
		t.Fatal(err)
	}
	m.check(t, b, 1, 3)
}

func TestIDXLabelsPath(t *testing.T) {
	for in, want := range map[string]string{
		"train-images-idx3-ubyte.gz":             "train-labels-idx1-ubyte.gz",
		"/d/t10k-images-idx3-ubyte":              "/d/t10k-labels-idx1-ubyte",
		"/images-idx3/a/train-images-idx3-ubyte": "/images-idx3/a/train-labels-idx1-ubyte", // directory untouched
	} {
		got, err := IDXLabelsPath(in)
		if err != nil || got != want {
			t.Errorf("IDXLabelsPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := IDXLabelsPath("/d/images.bin"); err == nil || !strings.Contains(err.Error(), "/d/images.bin") {
		t.Errorf("want an error naming the file, got %v", err)
	}
	if _, err := OpenIDX("/d/images.bin"); err == nil {
		t.Error("OpenIDX of an unconventional name: want error")
	}
}

func TestIDXOpenErrors(t *testing.T) {
	m := newMNIST(5, 4, 3)
	recSize := 12
	cases := []struct {
		name      string
		images    func() []byte
		labels    func() []byte
		wantInErr []string // besides the file name
	}{
		{"bad images magic", func() []byte { return idxBytes(idxLabelsMagic, []uint32{5, 4, 3}, m.pix) }, m.labelsFile,
			[]string{"bad magic 0x00000801 (want 0x00000803, an IDX3 ubyte images file)"}},
		{"bad labels magic", m.images, func() []byte { return idxBytes(0x00000802, []uint32{5}, m.labels) },
			[]string{"labels-idx1", "bad magic 0x00000802 (want 0x00000801"}},
		{"truncated images", func() []byte { return m.images()[:16+4*recSize+recSize/2] }, m.labelsFile,
			[]string{"truncated: header says 5 records of 12 bytes, file holds 4.5", "record 4 is the first incomplete one"}},
		{"truncated header", func() []byte { return m.images()[:10] }, m.labelsFile,
			[]string{"truncated header: 10 of 16 bytes"}},
		{"trailing images", func() []byte { return append(m.images(), 0) }, m.labelsFile,
			[]string{"trailing data"}},
		{"truncated labels", m.images, func() []byte { return m.labelsFile()[:8+3] },
			[]string{"labels-idx1", "file holds 3;"}},
		{"count mismatch", func() []byte { return idxBytes(idxImagesMagic, []uint32{4, 4, 3}, m.pix[:4*recSize]) }, m.labelsFile,
			[]string{"has 4 images but", "has 5 labels"}},
		{"zero rows", func() []byte { return idxBytes(idxImagesMagic, []uint32{5, 0, 3}, nil) }, m.labelsFile,
			[]string{"bad dimensions"}},
		{"huge header", func() []byte { return idxBytes(idxImagesMagic, []uint32{1 << 31, 1 << 31, 1 << 31}, nil) }, m.labelsFile,
			[]string{"too large"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			forPlainAndGzip(t, func(t *testing.T, gz bool) {
				dir := t.TempDir()
				img, lab := tc.images(), tc.labels()
				if gz {
					img, lab = gzipBytes(t, img), gzipBytes(t, lab)
				}
				path := filepath.Join(dir, "train-images-idx3-ubyte")
				writeFile(t, path, img)
				writeFile(t, filepath.Join(dir, "train-labels-idx1-ubyte"), lab)
				x, err := OpenIDX(path)
				if err == nil {
					x.Close()
					t.Fatal("want error")
				}
				// Every open error must tell the user which file is wrong.
				if !strings.Contains(err.Error(), dir) {
					t.Errorf("error does not name the file: %v", err)
				}
				for _, s := range tc.wantInErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
			})
		})
	}
}

func TestIDXMissingLabels(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t10k-images-idx3-ubyte.gz")
	writeFile(t, path, gzipBytes(t, newMNIST(2, 2, 2).images()))
	_, err := OpenIDX(path)
	if err == nil || !errors.Is(err, fs.ErrNotExist) ||
		!strings.Contains(err.Error(), filepath.Join(dir, "t10k-labels-idx1-ubyte.gz")) {
		t.Fatalf("want a not-exist error naming the labels file, got %v", err)
	}
	if _, err := OpenIDX(filepath.Join(dir, "none-images-idx3-ubyte")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing images file: got %v", err)
	}
}

// A gzip file cut anywhere must fail at open, naming the file: in the gzip
// header, in the deflate data, or in the trailer (where only the checksum
// and length are lost, and the data itself is complete).
func TestIDXTruncatedGzip(t *testing.T) {
	m := newMNIST(50, 8, 8)
	full := gzipBytes(t, m.images())
	dir := t.TempDir()
	path := filepath.Join(dir, "cut-images-idx3-ubyte.gz")
	writeFile(t, filepath.Join(dir, "cut-labels-idx1-ubyte.gz"), gzipBytes(t, m.labelsFile()))
	sawTruncatedRecord := false
	for cut := 1; cut < len(full); cut++ {
		writeFile(t, path, full[:len(full)-cut])
		x, err := OpenIDX(path)
		if err == nil {
			x.Close()
			t.Fatalf("cut %d of %d bytes: want error", cut, len(full))
		}
		if !strings.Contains(err.Error(), path) {
			t.Fatalf("cut %d: error does not name the file: %v", cut, err)
		}
		if cut <= 8 && !strings.Contains(err.Error(), "truncated gzip stream after the last record") {
			t.Fatalf("cut %d, in the trailer only: got %v", cut, err)
		}
		sawTruncatedRecord = sawTruncatedRecord || strings.Contains(err.Error(), "is the first incomplete one")
	}
	if !sawTruncatedRecord {
		t.Error("no cut was reported with the first incomplete record")
	}
}

func TestIDXRange(t *testing.T) {
	forPlainAndGzip(t, func(t *testing.T, gz bool) {
		path := newMNIST(5, 2, 2).write(t, t.TempDir(), gz)
		x, err := OpenIDX(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range [][2]int64{{3, 2}, {-1, 2}, {0, 6}, {6, 6}, {4, 9}} {
			_, err := x.Read(r[0], r[1])
			if !errors.Is(err, ErrOutOfRange) || !strings.Contains(err.Error(), path) {
				t.Errorf("Read(%d,%d): want ErrOutOfRange naming the file, got %v", r[0], r[1], err)
			}
		}
		if err := x.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := x.Read(0, 1); !errors.Is(err, os.ErrClosed) {
			t.Errorf("Read after Close: got %v", err)
		}
		if err := x.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
	})
}

// The plain reader reads at Read time, so a file cut after open must give an
// error naming the record, not zeros.
func TestIDXShrunkAfterOpen(t *testing.T) {
	m := newMNIST(10, 4, 4)
	path := m.write(t, t.TempDir(), false)
	x, err := OpenIDX(path)
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if err := os.Truncate(path, 16+6*16+3); err != nil {
		t.Fatal(err)
	}
	_, err = x.Read(2, 10)
	var re *RecordError
	if !errors.As(err, &re) || re.Record != 6 || re.Source != path {
		t.Fatalf("want a RecordError for record 6, got %v", err)
	}
}

func TestIDXConcurrentReads(t *testing.T) {
	forPlainAndGzip(t, func(t *testing.T, gz bool) {
		m := newMNIST(300, 5, 5)
		x, err := OpenIDX(m.write(t, t.TempDir(), gz))
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				for range 50 {
					start := rng.Int64N(300)
					end := start + rng.Int64N(300-start+1)
					b, err := x.Read(start, end)
					if err != nil {
						t.Error(err)
						return
					}
					if err := m.diff(b, start, end); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	})
}

// Close while reads are in flight: reads either succeed or report the closed
// file; the race detector checks the rest.
func TestIDXCloseDuringReads(t *testing.T) {
	m := newMNIST(100, 4, 4)
	x, err := OpenIDX(m.write(t, t.TempDir(), true))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 200 {
				b, err := x.Read(10, 60)
				if err != nil {
					if !errors.Is(err, os.ErrClosed) {
						t.Error(err)
					}
					return
				}
				if err := m.diff(b, 10, 60); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	if err := x.Close(); err != nil {
		t.Error(err)
	}
	wg.Wait()
}

func TestIDXFashionMNIST(t *testing.T) {
	const dir = "/usr/share/datasets/fashion-mnist"
	for _, tc := range []struct {
		prefix string
		n      int64
	}{{"train", 60000}, {"t10k", 10000}} {
		t.Run(tc.prefix, func(t *testing.T) {
			path := filepath.Join(dir, tc.prefix+"-images-idx3-ubyte.gz")
			if _, err := os.Stat(path); err != nil {
				t.Skipf("data set not installed: %v", err)
			}
			src, err := Open(path)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			if src.Len() != tc.n || !slices.Equal(src.FeatureShape(), []int{28, 28, 1}) {
				t.Fatalf("Len %d shape %v", src.Len(), src.FeatureShape())
			}
			var perClass [10]int64
			var last *Batch
			for start := int64(0); start < tc.n; start += 5000 { // whole file in tasks
				if last, err = src.Read(start, start+5000); err != nil {
					t.Fatal(err)
				}
				for _, l := range last.Labels {
					if l < 0 || l > 9 {
						t.Fatalf("label %d out of 0..9", l)
					}
					perClass[l]++
				}
				for _, v := range last.Features {
					if v < 0 || v > 1 {
						t.Fatalf("feature %v out of [0,1]", v)
					}
				}
			}
			for c, k := range perClass { // Fashion-MNIST is balanced
				if k != tc.n/10 {
					t.Errorf("class %d has %d records, want %d", c, k, tc.n/10)
				}
			}
			tail, err := src.Read(tc.n-10, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if tail.N != 10 || tail.Index[9] != tc.n-1 || !slices.Equal(tail.Labels, last.Labels[4990:]) ||
				!slices.Equal(tail.Features, last.Features[4990*784:]) {
				t.Fatalf("tail read disagrees with the task read")
			}
			if _, err := src.Read(tc.n-10, tc.n+1); !errors.Is(err, ErrOutOfRange) {
				t.Fatalf("read across the end: got %v", err)
			}
		})
	}
}

// BenchmarkIDXRead measures records/s for tasks of 512 records, cycling
// through the file: plain (ReadAt per task) and gzip (decoded at open).
func BenchmarkIDXRead(b *testing.B) {
	const task = 512
	m := newMNIST(60000, 28, 28)
	dir := b.TempDir()
	for _, gz := range []bool{false, true} {
		sub := filepath.Join(dir, fmt.Sprint(gz))
		if err := os.Mkdir(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		path := m.write(b, sub, gz)
		b.Run(map[bool]string{false: "plain", true: "gzip"}[gz], func(b *testing.B) {
			x, err := OpenIDX(path)
			if err != nil {
				b.Fatal(err)
			}
			defer x.Close()
			b.SetBytes(task * 28 * 28)
			var start, records int64
			for b.Loop() {
				if start+task > x.Len() {
					start = 0
				}
				batch, err := x.Read(start, start+task)
				if err != nil {
					b.Fatal(err)
				}
				start += task
				records += int64(batch.N)
			}
			b.ReportMetric(float64(records)/b.Elapsed().Seconds(), "records/s")
		})
	}
}
