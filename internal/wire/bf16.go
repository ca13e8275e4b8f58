package wire

import "math"

// toBF16 rounds f to bfloat16 (the upper 16 bits of a float32), to
// nearest with ties to even, as TensorFlow and PyTorch do; a NaN stays a
// (quiet) NaN rather than rounding into an infinity.
func toBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x40
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// fromBF16 widens a bfloat16 to the float32 it stands for (exactly).
func fromBF16(h uint16) float32 { return math.Float32frombits(uint32(h) << 16) }

// putBF16 writes src into dst (len 2*len(src)) as little-endian bfloat16.
func putBF16(dst []byte, src []float32) {
	dst = dst[:2*len(src)]
	n := putBF16Vector(dst, src)
	dst, src = dst[2*n:], src[n:]
	for i, f := range src {
		h := toBF16(f)
		d := dst[2*i : 2*i+2 : 2*i+2]
		d[0], d[1] = byte(h), byte(h>>8)
	}
}

// getBF16 is the inverse of putBF16, widening to float32.
func getBF16(dst []float32, src []byte) {
	src = src[:2*len(dst)]
	n := getBF16Vector(dst, src)
	dst, src = dst[n:], src[2*n:]
	for i := range dst {
		s := src[2*i : 2*i+2 : 2*i+2]
		dst[i] = math.Float32frombits(uint32(s[0])<<16 | uint32(s[1])<<24)
	}
}
