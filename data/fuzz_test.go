package data

import (
	"path/filepath"
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
