package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"

	"elasticdl/proto/pserverpb"
)

// ErrNilTensor is returned when decoding a nil *pserverpb.Tensor.
var ErrNilTensor = errors.New("wire: nil tensor")

// EncodeTensor returns a new protobuf tensor holding a copy of data. The
// copy matters: the message is marshaled later, possibly after the caller
// has changed data again. It panics when len(data) does not match shape,
// which is a programming error in the caller.
func EncodeTensor(name string, shape []int, data []float32) *pserverpb.Tensor {
	t := &pserverpb.Tensor{}
	EncodeTensorTo(t, name, shape, data)
	return t
}

// EncodeTensorTo is EncodeTensor writing into t, reusing the capacity of
// t.Dims and t.Content, so a caller sending the same model repeatedly (a
// worker pushing gradients) does not allocate once warm. t must not be in
// use by an in-flight RPC.
func EncodeTensorTo(t *pserverpb.Tensor, name string, shape []int, data []float32) {
	EncodeTensorAs(t, name, shape, data, pserverpb.DType_FLOAT32)
}

// EncodeTensorAs is EncodeTensorTo with the elements in dtype: float32
// as they are, bfloat16 rounded to nearest even. It panics on an unknown
// dtype, as on a shape that does not describe data.
func EncodeTensorAs(t *pserverpb.Tensor, name string, shape []int, data []float32, dtype pserverpb.DType) {
	if n, err := NumElements(shape); err != nil || n != len(data) {
		// Cloning keeps shape from escaping to the heap on the happy path.
		panic(fmt.Sprintf("wire: encode %q: shape %v does not describe %d elements", name, slices.Clone(shape), len(data)))
	}
	size, err := ElementSize(dtype)
	if err != nil {
		panic(fmt.Sprintf("wire: encode %q: %v", name, err))
	}
	t.Name, t.Dtype = name, dtype
	t.Dims = t.Dims[:0]
	for _, d := range shape {
		t.Dims = append(t.Dims, int64(d))
	}
	nb := size * len(data)
	if cap(t.Content) >= nb {
		t.Content = t.Content[:nb]
	} else {
		t.Content = make([]byte, nb)
	}
	if dtype == pserverpb.DType_BFLOAT16 {
		putBF16(t.Content, data)
	} else {
		putFloats(t.Content, data)
	}
}

// CheckDType reports an element type this package cannot encode or
// decode: the one check behind the PS's answers and the client's option.
func CheckDType(dtype pserverpb.DType) error {
	_, err := ElementSize(dtype)
	return err
}

// ElementSize is the bytes an element of dtype takes on the wire.
func ElementSize(dtype pserverpb.DType) (int, error) {
	switch dtype {
	case pserverpb.DType_FLOAT32:
		return 4, nil
	case pserverpb.DType_BFLOAT16:
		return 2, nil
	}
	return 0, fmt.Errorf("unknown element type %d", dtype)
}

// decode widens t's content (validated) into dst.
func decode(t *pserverpb.Tensor, dst []float32) {
	if t.Dtype == pserverpb.DType_BFLOAT16 {
		getBF16(dst, t.Content)
	} else {
		getFloats(dst, t.Content)
	}
}

// DecodeTensor returns the shape and a newly allocated copy of the data.
func DecodeTensor(t *pserverpb.Tensor) (shape []int, data []float32, err error) {
	n, err := Validate(t)
	if err != nil {
		return nil, nil, err
	}
	shape = make([]int, len(t.Dims))
	for i, d := range t.Dims {
		shape[i] = int(d)
	}
	data = make([]float32, n)
	decode(t, data)
	return shape, data, nil
}

// DecodeInto decodes t into dst without allocating. dst must have exactly
// as many elements as t's dims describe; on any error dst is unchanged.
func DecodeInto(t *pserverpb.Tensor, dst []float32) error {
	n, err := Validate(t)
	if err != nil {
		return err
	}
	if n != len(dst) {
		return fmt.Errorf("wire: tensor %q: dims %v have %d elements, destination has %d", t.GetName(), t.GetDims(), n, len(dst))
	}
	decode(t, dst)
	return nil
}

// View returns t's float32 data without copying it when the content can be
// read in place (float32 on a little-endian host, 4-byte aligned), and
// otherwise decodes it into scratch, which must have room for it. Either
// way the result has exactly n elements, where n must be what t's dims
// describe. The result aliases t's content or scratch: read it only while
// both are unchanged.
func View(t *pserverpb.Tensor, n int, scratch []float32) ([]float32, error) {
	m, err := Validate(t)
	if err != nil {
		return nil, err
	}
	if m != n {
		return nil, fmt.Errorf("wire: tensor %q: dims %v have %d elements, want %d", t.GetName(), t.GetDims(), m, n)
	}
	if t.Dtype != pserverpb.DType_BFLOAT16 {
		if v, ok := viewFloats(t.Content); ok {
			return v, nil
		}
	}
	if len(scratch) < n {
		return nil, fmt.Errorf("wire: tensor %q: %d elements, scratch holds %d", t.GetName(), n, len(scratch))
	}
	decode(t, scratch[:n])
	return scratch[:n], nil
}

// DecodeIntoShape is DecodeInto that also requires t's dims to equal shape
// exactly, not just to have the same number of elements: a [2,3] tensor is
// not a valid value for a [3,2] parameter.
func DecodeIntoShape(t *pserverpb.Tensor, shape []int, dst []float32) error {
	if err := CheckShape(t, shape); err != nil {
		return err
	}
	return DecodeInto(t, dst)
}

// CheckShape reports whether t's dims equal shape and its content length
// matches them.
func CheckShape(t *pserverpb.Tensor, shape []int) error {
	if _, err := Validate(t); err != nil {
		return err
	}
	if !sameDims(t.Dims, shape) {
		return fmt.Errorf("wire: tensor %q: dims %v, want %v", t.GetName(), t.GetDims(), shape)
	}
	return nil
}

// Validate checks t (non-nil, non-negative dims, a known dtype, content
// exactly prod(dims) elements of it) and returns its element count.
func Validate(t *pserverpb.Tensor) (int, error) {
	if t == nil {
		return 0, ErrNilTensor
	}
	n, err := NumElements(t.Dims)
	if err != nil {
		return 0, fmt.Errorf("wire: tensor %q: dims %v: %w", t.Name, t.Dims, err)
	}
	size, err := ElementSize(t.Dtype)
	if err != nil {
		return 0, fmt.Errorf("wire: tensor %q: %w", t.Name, err)
	}
	if len(t.Content) != size*n {
		return 0, fmt.Errorf("wire: tensor %q: content is %d bytes, dims %v need %d", t.Name, len(t.Content), t.Dims, size*n)
	}
	return n, nil
}

var (
	errNegativeDim = errors.New("negative dimension")
	errTooLarge    = errors.New("too large")
)

// NumElements is the number of elements of a tensor of the given shape
// (wire dims or a parameter's shape): the product of the dimensions. A
// negative dimension is an error, and so is a product above MaxInt32,
// which must not wrap around to alias a small length.
func NumElements[D int | int64](shape []D) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, errNegativeDim
		}
		if d != 0 && int64(n) > math.MaxInt32/int64(d) {
			return 0, errTooLarge
		}
		n *= int(d)
	}
	return n, nil
}

func sameDims(dims []int64, shape []int) bool {
	if len(dims) != len(shape) {
		return false
	}
	for i := range dims {
		if dims[i] != int64(shape[i]) {
			return false
		}
	}
	return true
}

// Checksum is FNV-1a 64 over the tensors' names, dims and bytes, in
// order: what AllReduce workers compare to show they hold the same model.
func Checksum(ts []*pserverpb.Tensor) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, t := range ts {
		h.Write([]byte(t.GetName()))
		for _, d := range t.GetDims() {
			binary.LittleEndian.PutUint64(b[:], uint64(d))
			h.Write(b[:])
		}
		h.Write(t.GetContent())
	}
	return h.Sum64()
}
