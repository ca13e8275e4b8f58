package cli

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"elasticdl/data"
)

// TestServeData: each range's reply decodes to what the source's Read
// gives; a bad request is an error reply and the next one is served.
func TestServeData(t *testing.T) {
	path := filepath.Join(t.TempDir(), "d.csv")
	if err := os.WriteFile(path, []byte("1,0.5,red\n0,-2,blue\nx,1,red\n1,3,green\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, err := data.Open("csv://" + path + "?schema=y:label,a:num,c:cat")
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var out bytes.Buffer
	if err := serveData(src, strings.NewReader("0 4\n3 2\nzero 1\n1 2\n"), &out); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(&out)
	var head map[string]int64
	if line, _ := r.ReadBytes('\n'); json.Unmarshal(line, &head) != nil || head["records"] != 4 {
		t.Fatalf("first line %v, want records 4", head)
	}
	for _, want := range []struct {
		start, end int64
		err        string
	}{{0, 4, ""}, {0, 0, "out of bounds"}, {0, 0, `request "zero 1": `}, {1, 2, ""}} {
		var h dataReply
		line, _ := r.ReadBytes('\n')
		if err := json.Unmarshal(line, &h); err != nil {
			t.Fatalf("reply %q: %v", line, err)
		}
		if want.err != "" {
			if !strings.Contains(h.Error, want.err) {
				t.Errorf("reply %+v, want an error with %q", h, want.err)
			}
			continue
		}
		b, _ := src.Read(want.start, want.end)
		raw := make([]byte, len(batchBytes(b)))
		if _, err := io.ReadFull(r, raw); err != nil {
			t.Fatal(err)
		}
		if h.N != b.N || len(h.Corrupt) != len(b.Corrupt) || h.NumCategorical != 1 {
			t.Fatalf("reply %+v for [%d, %d), the source's batch %d records, %d corrupt", h, want.start, want.end, b.N, len(b.Corrupt))
		}
		if got := math.Float32frombits(binary.LittleEndian.Uint32(raw)); got != b.Features[0] {
			t.Errorf("first feature %v, want %v", got, b.Features[0])
		}
		if !bytes.Equal(raw, batchBytes(b)) {
			t.Errorf("[%d, %d): the bytes differ from the source's batch", want.start, want.end)
		}
	}
	if rest, _ := io.ReadAll(r); len(rest) != 0 {
		t.Errorf("%d bytes after the last reply", len(rest))
	}
}
