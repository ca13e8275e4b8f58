package data

import (
	"bytes"
	"fmt"
	"math/rand"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzCSV checks that arbitrary bytes never panic the CSV reader and that its
// index always agrees with a sequential encoding/csv pass.
func FuzzCSV(f *testing.F) {
	for _, s := range trickyCSV {
		f.Add([]byte(s), false, byte(0))
	}
	f.Add([]byte("a,b,y\n1,2,3\n4,x,5\n"), true, byte(0))
	f.Add([]byte("1§\"2\n§\"§3\r\n"), false, byte(2))
	commas := []rune{',', ';', '§', '😀'}
	f.Fuzz(func(t *testing.T, data []byte, header bool, comma byte) {
		checkAgainstReference(t, data, commas[int(comma)%len(commas)], header)
	})
}

// FuzzIDX checks that arbitrary image and label files never panic the IDX
// reader, and that whatever it accepts reads back consistently.
func FuzzIDX(f *testing.F) {
	m := newMNIST(3, 2, 2)
	f.Add(m.images(), m.labelsFile())
	f.Add(gzipBytes(f, m.images()), gzipBytes(f, m.labelsFile()))
	f.Add(m.images()[:20], m.labelsFile())
	f.Add(idxBytes(idxImagesMagic, []uint32{1 << 30, 1 << 16, 1 << 16}, nil), m.labelsFile())
	f.Add(gzipBytes(f, idxBytes(idxImagesMagic, []uint32{1 << 30, 1 << 16, 1 << 16}, m.pix)), m.labelsFile())
	f.Fuzz(func(t *testing.T, images, labels []byte) {
		dir := t.TempDir()
		ip, lp := filepath.Join(dir, "f-images-idx3-ubyte"), filepath.Join(dir, "f-labels-idx1-ubyte")
		writeFile(t, ip, images)
		writeFile(t, lp, labels)
		x, err := OpenIDX(ip)
		if err != nil {
			return
		}
		defer x.Close()
		shape := x.FeatureShape()
		size := shape[0] * shape[1] * shape[2]
		for _, r := range [][2]int64{{0, x.Len()}, {x.Len() / 2, x.Len()}, {0, 0}} {
			b, err := x.Read(r[0], r[1])
			if err != nil {
				t.Fatalf("Read(%d,%d) of an accepted file: %v", r[0], r[1], err)
			}
			n := int(r[1] - r[0])
			if b.N != n || len(b.Labels) != n || len(b.Index) != n || len(b.Features) != n*size {
				t.Fatalf("Read(%d,%d): inconsistent batch", r[0], r[1])
			}
		}
	})
}

// TestParquetDamagedFiles opens and reads 2000 damaged copies of a file
// (bytes changed, zeros inserted, bytes cut): the library panics on many
// of them (slices out of range); each must be an error, never a panic.
func TestParquetDamagedFiles(t *testing.T) {
	whole := parquetSeed(t)
	rng := rand.New(rand.NewSource(1))
	dir := t.TempDir()
	errs := 0
	for i := range 2000 {
		data := bytes.Clone(whole)
		at := rng.Intn(len(data) - 8)
		switch i % 3 {
		case 0:
			for k := 0; k < 1+rng.Intn(4); k++ {
				data[rng.Intn(len(data))] = byte(rng.Intn(256))
			}
		case 1:
			data = append(data[:at], append(make([]byte, 1+rng.Intn(20)), data[at:]...)...)
		case 2:
			data = append(data[:at], data[at+1+rng.Intn(7):]...)
		}
		path := filepath.Join(dir, fmt.Sprintf("d%d.parquet", i))
		writeFile(t, path, data)
		p, err := Open(path)
		if err != nil {
			errs++
			if !strings.Contains(err.Error(), path+": ") {
				t.Fatalf("case %d: the error does not name the file: %v", i, err)
			}
			continue
		}
		n := min(p.Len(), 100)
		if _, err := p.Read(p.Len()-n, p.Len()); err != nil {
			errs++
		}
		p.Close()
	}
	t.Logf("%d of 2000 damaged files: an error at Open or Read", errs)
}

// parquetSeed is a small Parquet file of 40 records in row groups of 16.
func parquetSeed(t testing.TB) []byte {
	src, err := Open("synthetic-ctr://?records=40&dense=2&categorical=2&pairs=1&seed=5")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var out bytes.Buffer
	if _, _, err := ExportParquet(&out, src, 0, 40, 16); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// FuzzParquet checks that arbitrary bytes named *.parquet never panic the
// Parquet reader: a damaged file is an error at Open or at Read.
func FuzzParquet(f *testing.F) {
	whole := parquetSeed(f)
	f.Add(whole)
	f.Add(whole[:len(whole)/2])
	f.Add(append([]byte("PAR1"), whole[len(whole)-200:]...))
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(t.TempDir(), "f.parquet")
		writeFile(t, path, data)
		p, err := Open(path)
		if err != nil {
			return
		}
		defer p.Close()
		// Tasks are small: a damaged footer may claim any number of rows.
		n := min(p.Len(), 100)
		for _, r := range [][2]int64{{0, n}, {p.Len() - n, p.Len()}, {0, 0}} {
			b, err := p.Read(r[0], r[1])
			if err == nil && b.N+len(b.Corrupt) != int(r[1]-r[0]) {
				t.Fatalf("Read(%d,%d): %d records and %d corrupt", r[0], r[1], b.N, len(b.Corrupt))
			}
		}
	})
}
