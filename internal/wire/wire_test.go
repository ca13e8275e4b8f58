package wire

import (
	"bytes"
	"math"
	"slices"
	"strings"
	"testing"

	"elasticdl/proto/pserverpb"
)

func TestRoundTrip(t *testing.T) {
	cases := []struct {
		name  string
		shape []int
		data  []float32
	}{
		{"scalar", nil, []float32{3.5}},
		{"empty", []int{0, 4}, []float32{}},
		{"odd", []int{3}, []float32{1, -2, float32(math.Inf(1))}},
		{"matrix", []int{2, 3}, []float32{1, 2, 3, 4, 5, 6}},
		{"special", []int{5}, []float32{0, float32(math.Copysign(0, -1)), math.SmallestNonzeroFloat32, math.MaxFloat32, -1e-30}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pb := EncodeTensor(c.name, c.shape, c.data)
			if pb.Name != c.name {
				t.Errorf("name %q, want %q", pb.Name, c.name)
			}
			if len(pb.Content) != 4*len(c.data) {
				t.Fatalf("content %d bytes, want %d", len(pb.Content), 4*len(c.data))
			}
			shape, data, err := DecodeTensor(pb)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(shape, c.shape) && !(len(shape) == 0 && len(c.shape) == 0) {
				t.Errorf("shape %v, want %v", shape, c.shape)
			}
			if !bitsEqual(data, c.data) {
				t.Errorf("data %v, want %v", data, c.data)
			}
			dst := make([]float32, len(c.data))
			if err := DecodeIntoShape(pb, c.shape, dst); err != nil {
				t.Fatal(err)
			}
			if !bitsEqual(dst, c.data) {
				t.Errorf("DecodeInto %v, want %v", dst, c.data)
			}
		})
	}
}

func TestNaNSurvives(t *testing.T) {
	nan := math.Float32frombits(0x7fc00001) // a specific payload
	_, data, err := DecodeTensor(EncodeTensor("n", []int{1}, []float32{nan}))
	if err != nil {
		t.Fatal(err)
	}
	if math.Float32bits(data[0]) != 0x7fc00001 {
		t.Errorf("NaN bits %#x, want 0x7fc00001", math.Float32bits(data[0]))
	}
}

// TestWireFormat pins the bytes: little-endian IEEE-754, whatever the host.
func TestWireFormat(t *testing.T) {
	pb := EncodeTensor("w", []int{2}, []float32{1, -2})
	want := []byte{0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0xc0}
	if !bytes.Equal(pb.Content, want) {
		t.Errorf("content % x, want % x", pb.Content, want)
	}
	if !slices.Equal(pb.Dims, []int64{2}) {
		t.Errorf("dims %v", pb.Dims)
	}
	// The big-endian fallback must produce and read the same bytes.
	port := make([]byte, 8)
	putFloatsPortable(port, []float32{1, -2})
	if !bytes.Equal(port, want) {
		t.Errorf("portable content % x, want % x", port, want)
	}
	back := make([]float32, 2)
	getFloatsPortable(back, want)
	if back[0] != 1 || back[1] != -2 {
		t.Errorf("portable decode %v", back)
	}
}

func TestEncodeCopies(t *testing.T) {
	data := []float32{1, 2}
	pb := EncodeTensor("c", []int{2}, data)
	data[0] = 99
	_, got, _ := DecodeTensor(pb)
	if got[0] != 1 {
		t.Errorf("encoded tensor aliases caller data: got %v", got)
	}
}

func TestEncodeTensorToReuses(t *testing.T) {
	pb := &pserverpb.Tensor{}
	EncodeTensorTo(pb, "a", []int{4}, []float32{1, 2, 3, 4})
	buf := &pb.Content[0]
	EncodeTensorTo(pb, "a", []int{2, 2}, []float32{5, 6, 7, 8})
	if &pb.Content[0] != buf {
		t.Error("content buffer was reallocated although it was large enough")
	}
	shape, data, err := DecodeTensor(pb)
	if err != nil || !slices.Equal(shape, []int{2, 2}) || !slices.Equal(data, []float32{5, 6, 7, 8}) {
		t.Errorf("got %v %v %v", shape, data, err)
	}
	allocs := testing.AllocsPerRun(100, func() {
		EncodeTensorTo(pb, "a", []int{2, 2}, []float32{5, 6, 7, 8})
	})
	if allocs != 0 {
		t.Errorf("warm EncodeTensorTo allocates %v times", allocs)
	}
}

func TestEncodePanicsOnMismatch(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Error("no panic for data/shape mismatch")
		}
	}()
	EncodeTensor("bad", []int{2, 2}, []float32{1, 2, 3})
}

func TestDecodeErrors(t *testing.T) {
	cases := []struct {
		name string
		t    *pserverpb.Tensor
		want string
	}{
		{"nil", nil, "nil tensor"},
		{"short", &pserverpb.Tensor{Name: "x", Dims: []int64{2}, Content: make([]byte, 7)}, "content is 7 bytes"},
		{"long", &pserverpb.Tensor{Name: "x", Dims: []int64{2}, Content: make([]byte, 12)}, "need 8"},
		{"odd", &pserverpb.Tensor{Name: "x", Dims: []int64{1}, Content: make([]byte, 3)}, "content is 3 bytes"},
		{"negative", &pserverpb.Tensor{Name: "x", Dims: []int64{-1, -4}, Content: make([]byte, 16)}, "negative dimension"},
		{"overflow", &pserverpb.Tensor{Name: "x", Dims: []int64{1 << 40, 1 << 40}}, "too large"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, _, err := DecodeTensor(c.t); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("DecodeTensor error %v, want containing %q", err, c.want)
			}
			dst := []float32{7, 7}
			if err := DecodeInto(c.t, dst); err == nil {
				t.Error("DecodeInto: no error")
			}
			if dst[0] != 7 || dst[1] != 7 {
				t.Errorf("DecodeInto changed dst on error: %v", dst)
			}
		})
	}
}

func TestDecodeIntoMismatch(t *testing.T) {
	pb := EncodeTensor("m", []int{2, 3}, make([]float32, 6))
	if err := DecodeInto(pb, make([]float32, 5)); err == nil || !strings.Contains(err.Error(), `"m"`) {
		t.Errorf("length mismatch: error %v, want one naming the tensor", err)
	}
	if err := DecodeIntoShape(pb, []int{3, 2}, make([]float32, 6)); err == nil {
		t.Error("shape [2 3] decoded into [3 2] without error")
	}
	if err := DecodeIntoShape(pb, []int{2, 3}, make([]float32, 6)); err != nil {
		t.Error(err)
	}
	if err := DecodeInto(pb, make([]float32, 6)); err != nil {
		t.Error(err)
	}
	dst := make([]float32, 6)
	if a := testing.AllocsPerRun(100, func() { _ = DecodeInto(pb, dst) }); a != 0 {
		t.Errorf("DecodeInto allocates %v times", a)
	}
}

// TestView checks that a float32 tensor is read in place when its content
// is aligned, and decoded into the scratch buffer otherwise (misaligned,
// bfloat16), with the same values either way.
func TestView(t *testing.T) {
	data := []float32{1.5, -2, 3e-7, float32(math.Inf(-1))}
	aligned := EncodeTensor("a", []int{4}, data)
	misaligned := &pserverpb.Tensor{Name: "m", Dims: []int64{4}, Content: append(make([]byte, 1, 17), aligned.Content...)[1:]}
	bf16 := &pserverpb.Tensor{}
	EncodeTensorAs(bf16, "h", []int{4}, data, pserverpb.DType_BFLOAT16)
	for _, c := range []struct {
		name    string
		t       *pserverpb.Tensor
		inPlace bool
	}{
		{"aligned", aligned, nativeLittleEndian},
		{"misaligned", misaligned, false},
		{"bfloat16", bf16, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			scratch := make([]float32, 8)
			got, err := View(c.t, 4, scratch)
			if err != nil {
				t.Fatal(err)
			}
			want := data
			if c.t == bf16 {
				want = make([]float32, 4)
				if err := DecodeInto(bf16, want); err != nil {
					t.Fatal(err)
				}
			}
			if !bitsEqual(got, want) {
				t.Errorf("View = %v, want %v", got, want)
			}
			inPlace := &got[0] != &scratch[0]
			if inPlace != c.inPlace {
				t.Errorf("read in place: %v, want %v", inPlace, c.inPlace)
			}
			if inPlace {
				got[0] = 9 // the view aliases the content
				if v, _ := View(c.t, 4, nil); v[0] != 9 {
					t.Errorf("the view does not alias the content")
				}
			}
		})
	}
	if _, err := View(aligned, 3, make([]float32, 4)); err == nil || !strings.Contains(err.Error(), `"a"`) {
		t.Errorf("wrong length: error %v, want one naming the tensor", err)
	}
	if _, err := View(misaligned, 4, make([]float32, 3)); err == nil {
		t.Error("a decode into too small a scratch buffer: no error")
	}
	if _, err := View(&pserverpb.Tensor{Name: "x", Dims: []int64{2}, Content: make([]byte, 7)}, 2, make([]float32, 2)); err == nil {
		t.Error("a short content: no error")
	}
}

// TestBigModel goes past 4 MiB, the default gRPC message limit.
func TestBigModel(t *testing.T) {
	const n = 3<<20 + 7 // ~12 MiB, odd length
	data := make([]float32, n)
	for i := range data {
		data[i] = float32(i)*0.5 - 1000
	}
	pb := EncodeTensor("big", []int{n}, data)
	if len(pb.Content) != 4*n {
		t.Fatalf("content %d bytes", len(pb.Content))
	}
	dst := make([]float32, n)
	if err := DecodeInto(pb, dst); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(dst, data) {
		t.Fatal("big model round trip differs")
	}
	// Spot-check against the portable decoder so the fast path cannot
	// agree with itself on a wrong layout.
	port := make([]float32, n)
	getFloatsPortable(port, pb.Content)
	if !slices.Equal(port, data) {
		t.Fatal("fast encoder disagrees with portable decoder")
	}
}

func bitsEqual(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

const benchN = 1 << 20 // 4 MiB of float32

func BenchmarkEncode(b *testing.B) {
	data := make([]float32, benchN)
	pb := &pserverpb.Tensor{}
	b.SetBytes(4 * benchN)
	for b.Loop() {
		EncodeTensorTo(pb, "w", []int{benchN}, data)
	}
}

func BenchmarkDecodeInto(b *testing.B) {
	pb := EncodeTensor("w", []int{benchN}, make([]float32, benchN))
	dst := make([]float32, benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		if err := DecodeInto(pb, dst); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodePortable(b *testing.B) {
	data := make([]float32, benchN)
	buf := make([]byte, 4*benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		putFloatsPortable(buf, data)
	}
}

func BenchmarkDecodePortable(b *testing.B) {
	buf := make([]byte, 4*benchN)
	dst := make([]float32, benchN)
	b.SetBytes(4 * benchN)
	for b.Loop() {
		getFloatsPortable(dst, buf)
	}
}

func TestNumElements(t *testing.T) {
	if n, err := NumElements([]int{2, 3, 4}); err != nil || n != 24 {
		t.Errorf("[2 3 4]: %d, %v", n, err)
	}
	if n, err := NumElements([]int64{}); err != nil || n != 1 {
		t.Errorf("scalar: %d, %v", n, err)
	}
	if n, err := NumElements([]int{5, 0, -1}); err == nil {
		t.Errorf("negative dimension: %d, no error", n)
	}
	if n, err := NumElements([]int64{1 << 20, 1 << 20}); err == nil {
		t.Errorf("2^40 elements: %d, no error", n)
	}
}
