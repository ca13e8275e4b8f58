package wire

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"elasticdl/proto/pserverpb"
)

func TestBF16Rounding(t *testing.T) {
	for _, c := range []struct {
		in   uint32 // float32 bits
		want uint16
	}{
		{0x3f800000, 0x3f80}, // 1
		{0x3f808000, 0x3f80}, // halfway, even below: down
		{0x3f818000, 0x3f82}, // halfway, odd below: up
		{0x3f808001, 0x3f81}, // above halfway: up
		{0xbf80ffff, 0xbf81}, // negative, rounds away from 1
		{0x7f7fffff, 0x7f80}, // the largest float32 rounds to +Inf, as IEEE says
		{0x7f800000, 0x7f80}, // +Inf stays
		{0xff800000, 0xff80}, // -Inf stays
		{0x00000001, 0x0000}, // the smallest subnormal rounds to 0
		{0x80000000, 0x8000}, // -0 stays
	} {
		if got := toBF16(math.Float32frombits(c.in)); got != c.want {
			t.Errorf("toBF16(%#08x) = %#04x, want %#04x", c.in, got, c.want)
		}
	}
	for _, nan := range []uint32{0x7fc00000, 0x7f800001, 0xffffffff} {
		if got := fromBF16(toBF16(math.Float32frombits(nan))); !math.IsNaN(float64(got)) {
			t.Errorf("NaN %#08x became %v", nan, got)
		}
	}
}

// TestBF16Tensor: a bfloat16 tensor is half the bytes, decodes to the
// rounded values (exactly those that bfloat16 represents), and is checked
// against its own element size.
func TestBF16Tensor(t *testing.T) {
	data := []float32{1, -2.5, 3.14159, 1e-20, 65504, 0}
	var tt pserverpb.Tensor
	EncodeTensorAs(&tt, "w", []int{2, 3}, data, pserverpb.DType_BFLOAT16)
	if len(tt.Content) != 12 || tt.Dtype != pserverpb.DType_BFLOAT16 {
		t.Fatalf("content %d bytes, dtype %v", len(tt.Content), tt.Dtype)
	}
	got := make([]float32, 6)
	if err := DecodeIntoShape(&tt, []int{2, 3}, got); err != nil {
		t.Fatal(err)
	}
	for i, f := range data {
		want := fromBF16(toBF16(f))
		if got[i] != want || math.Abs(float64(got[i]-f)) > math.Abs(float64(f))/256 {
			t.Errorf("element %d: %v decoded as %v, want %v (within 2^-8 of it)", i, f, got[i], want)
		}
	}
	if got[0] != 1 || got[1] != -2.5 || got[5] != 0 {
		t.Errorf("values bfloat16 holds exactly changed: %v", got)
	}
	// float32 content under a bfloat16 dtype, and an unknown dtype, are
	// refused with what is wrong.
	bad := EncodeTensor("w", []int{2, 3}, data)
	bad.Dtype = pserverpb.DType_BFLOAT16
	if _, err := Validate(bad); err == nil || !strings.Contains(err.Error(), "content is 24 bytes") {
		t.Errorf("float32 bytes labelled bfloat16: %v", err)
	}
	bad.Dtype = 7
	if _, err := Validate(bad); err == nil || !strings.Contains(err.Error(), "unknown element type 7") {
		t.Errorf("unknown dtype: %v", err)
	}
}

func BenchmarkBF16(b *testing.B) {
	data := make([]float32, 1<<20)
	for i := range data {
		data[i] = float32(i) * 1e-3
	}
	var tt pserverpb.Tensor
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(4 << 20)
		for b.Loop() {
			EncodeTensorAs(&tt, "w", []int{len(data)}, data, pserverpb.DType_BFLOAT16)
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(4 << 20)
		for b.Loop() {
			if err := DecodeInto(&tt, data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestBF16VectorMatchesScalar: the vector conversions (AVX2) give the
// scalar ones' bits for every kind of float32 — ties, NaNs, infinities,
// subnormals — at lengths around the vector width.
func TestBF16VectorMatchesScalar(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	special := []uint32{0x3f808000, 0x3f818000, 0x7f7fffff, 0x7f800000, 0xff800000, 0x7fc00000, 0x7f800001, 0xffffffff, 1, 0x80000000, 0x00808000}
	for _, n := range []int{0, 1, 15, 16, 17, 31, 32, 33, 1000, 1027} {
		src := make([]float32, n)
		for i := range src {
			b := rng.Uint32()
			if i%3 == 0 {
				b = special[rng.IntN(len(special))]
			}
			src[i] = math.Float32frombits(b)
		}
		dst := make([]byte, 2*n)
		putBF16(dst, src)
		back := make([]float32, n)
		getBF16(back, dst)
		for i, f := range src {
			h := uint16(dst[2*i]) | uint16(dst[2*i+1])<<8
			if want := toBF16(f); h != want {
				t.Fatalf("n=%d element %d (%#08x): %#04x, want %#04x", n, i, math.Float32bits(f), h, want)
			}
			if math.Float32bits(back[i]) != math.Float32bits(fromBF16(h)) {
				t.Fatalf("n=%d element %d: decoded %#08x, want %#08x", n, i, math.Float32bits(back[i]), math.Float32bits(fromBF16(h)))
			}
		}
	}
}
