package wire

import (
	"encoding/binary"
	"math"
)

// putFloatsPortable is the byte-order independent encoder used on
// big-endian hosts; tests run it everywhere to pin down the wire format.
func putFloatsPortable(dst []byte, src []float32) {
	_ = dst[:4*len(src)]
	for i, f := range src {
		binary.LittleEndian.PutUint32(dst[4*i:], math.Float32bits(f))
	}
}

func getFloatsPortable(dst []float32, src []byte) {
	_ = src[:4*len(dst)]
	for i := range dst {
		dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(src[4*i:]))
	}
}
