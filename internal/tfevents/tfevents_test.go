package tfevents

import (
	"bytes"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestCRC(t *testing.T) {
	for _, tc := range []struct {
		name   string
		data   []byte
		masked bool
		want   uint32
	}{
		{"crc32c check value", []byte("123456789"), false, 0xe3069283},
		{"crc32c of empty", nil, false, 0},
		{"crc32c of 32 zero bytes (RFC 3720, B.4)", make([]byte, 32), false, 0x8a9136aa},
		// A file_version event TensorFlow wrote; the masked CRC is the one
		// TensorBoard's own reader tests with (data/server/masked_crc.rs).
		{"masked crc32c of a real event", []byte("\x1a\x11CRC test, one two"), true, 0x5794d08a},
		{"masked crc32c of empty", nil, true, maskDelta},
		// The length header of a 24-byte record, with the masked CRC a
		// file TensorFlow 2 wrote carries after it.
		{"masked length of a real record", []byte{0x18, 0, 0, 0, 0, 0, 0, 0}, true, 0x224b7fa3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := crc32.Checksum(tc.data, castagnoli)
			if tc.masked {
				got = MaskedCRC(tc.data)
			}
			if got != tc.want {
				t.Fatalf("got %#08x, want %#08x", got, tc.want)
			}
		})
	}
}

// An event encoded by hand from event.proto and summary.proto.
func TestEventMarshal(t *testing.T) {
	for _, tc := range []struct {
		name string
		e    Event
		hex  string
	}{
		{"header", Event{WallTime: 1.5, FileVersion: FileVersion},
			"09000000000000f83f" + "1a0d" + hex.EncodeToString([]byte("brain.Event:2"))},
		{"scalar", Event{WallTime: 1.5, Step: 3, Values: []Value{{"loss", 0.25}}},
			"09000000000000f83f" + "1003" + "2a0d" + "0a0b" + "0a04" + hex.EncodeToString([]byte("loss")) + "150000803e"},
		{"two values", Event{Step: 300, Values: []Value{{"a", 1}, {"b", -2}}},
			"10ac02" + "2a14" + "0a08" + "0a0161" + "150000803f" + "0a08" + "0a0162" + "15000000c0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := hex.EncodeToString(tc.e.Marshal())
			if got != tc.hex {
				t.Fatalf("marshal\n got %s\nwant %s", got, tc.hex)
			}
			back, err := ParseEvent(tc.e.Marshal())
			if err != nil {
				t.Fatal(err)
			}
			if back.WallTime != tc.e.WallTime || back.Step != tc.e.Step || back.FileVersion != tc.e.FileVersion || len(back.Values) != len(tc.e.Values) {
				t.Fatalf("parsed %+v, want %+v", back, tc.e)
			}
			for i, v := range back.Values {
				if v != tc.e.Values[i] {
					t.Fatalf("value %d: %+v, want %+v", i, v, tc.e.Values[i])
				}
			}
		})
	}
}

// What Writer writes, ReadScalars reads back, and two writers started in
// the same second get files of their own.
func TestWriterRoundTrip(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tb")
	now := time.Unix(1700000000, 250_000_000)
	w1, err := Create(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	w2, err := Create(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	if w1.Path() == w2.Path() || !strings.HasPrefix(filepath.Base(w1.Path()), "events.out.tfevents.1700000000.") {
		t.Fatalf("paths %s, %s", w1.Path(), w2.Path())
	}
	w1.WriteScalars(now, 10, Value{"loss", 0.5}, Value{"records_per_second", 123})
	if err := w1.Flush(); err != nil {
		t.Fatal(err)
	}
	w1.WriteScalars(now.Add(time.Second), 20, Value{"loss", 0.25})
	for _, w := range []*Writer{w1, w2} {
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
	}
	got, err := ReadScalars(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []Scalar{
		{1700000000.25, 10, "loss", 0.5},
		{1700000000.25, 10, "records_per_second", 123},
		{1700000001.25, 20, "loss", 0.25},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("scalar %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A file cut anywhere inside a record, or with any byte of a record's
// framing or data flipped, is an error naming the record's offset.
func TestCorruptFiles(t *testing.T) {
	var file []byte
	file = AppendRecord(file, Event{WallTime: 1, FileVersion: FileVersion}.Marshal())
	second := len(file)
	file = AppendRecord(file, Event{Step: 1, Values: []Value{{"loss", 1}}}.Marshal())
	for _, tc := range []struct {
		name string
		data []byte
		want []string
	}{
		{"cut in header", file[:second+5], []string{"offset 40", "header cut short"}},
		{"cut in data", file[:second+headerLen+3], []string{"offset 40", "data cut short"}},
		{"cut in data CRC", file[:len(file)-1], []string{"offset 40", "data cut short"}},
		{"length flipped", flip(file, second+1), []string{"offset 40", "length CRC"}},
		{"length CRC flipped", flip(file, second+9), []string{"offset 40", "length CRC"}},
		{"data flipped", flip(file, second+headerLen+2), []string{"offset 40", "data CRC"}},
		{"data CRC flipped", flip(file, len(file)-2), []string{"offset 40", "data CRC"}},
		{"first data flipped", flip(file, headerLen), []string{"offset 0", "data CRC"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			events, err := ReadEvents(bytes.NewReader(tc.data))
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v, want ErrCorrupt", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q lacks %q", err, w)
				}
			}
			if strings.HasPrefix(tc.name, "cut") && !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("error %v, want io.ErrUnexpectedEOF", err)
			}
			if len(events) > 1 {
				t.Fatalf("read %d events from a corrupt second record", len(events))
			}
		})
	}
	if _, err := ReadEvents(bytes.NewReader(AppendRecord(nil, Event{Step: 1}.Marshal()))); err == nil {
		t.Fatal("a file without a header event was read")
	}
}

func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0x40
	return c
}
