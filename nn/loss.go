package nn

import (
	"errors"
	"fmt"
	"math"
)

// ErrLabel reports a class label outside [0, numClasses).
var ErrLabel = errors.New("nn: label out of range")

// SoftmaxCrossEntropy returns the mean softmax cross-entropy of logits
// [N,K] against integer labels, and dL/dlogits (already divided by N).
// It uses the log-sum-exp trick, so large logits do not overflow. A label
// outside [0,K) or a length mismatch is reported as an error (wrapping
// ErrLabel or ErrShape), never a panic, since labels come from data.
//
// It allocates dlogits; training loops should use SoftmaxCrossEntropyInto.
func SoftmaxCrossEntropy(logits *Tensor, labels []int32) (float32, *Tensor, error) {
	return SoftmaxCrossEntropyInto(nil, logits, labels)
}

// SoftmaxCrossEntropyInto is SoftmaxCrossEntropy writing the gradient into
// dst when dst already has the logits' shape, and into a new tensor
// otherwise; like append, use the returned tensor:
//
//	loss, d, err = nn.SoftmaxCrossEntropyInto(d, logits, labels)
func SoftmaxCrossEntropyInto(dst, logits *Tensor, labels []int32) (float32, *Tensor, error) {
	if len(logits.Shape) != 2 {
		return 0, nil, fmt.Errorf("softmax cross-entropy: logits shape %v, want [N,K]: %w", logits.Shape, ErrShape)
	}
	n, k := logits.Shape[0], logits.Shape[1]
	if len(labels) != n {
		return 0, nil, fmt.Errorf("softmax cross-entropy: %d labels for %d rows: %w", len(labels), n, ErrShape)
	}
	for i, l := range labels {
		if l < 0 || int(l) >= k {
			return 0, nil, fmt.Errorf("softmax cross-entropy: label[%d]=%d with %d classes: %w", i, l, k, ErrLabel)
		}
	}
	d := ensure(dst, n, k)
	if n == 0 {
		return 0, d, nil
	}
	inv := 1 / float64(n)
	var total float64
	for i := 0; i < n; i++ {
		row := logits.Data[i*k : (i+1)*k]
		drow := d.Data[i*k : (i+1)*k]
		m := row[0]
		for _, v := range row[1:] {
			m = max(m, v)
		}
		// Accumulate in float64: the sum feeds a log and the mean loss is
		// compared across steps, so float32 round-off would show.
		var sum float64
		for j, v := range row {
			e := math.Exp(float64(v - m))
			drow[j] = float32(e)
			sum += e
		}
		lse := float64(m) + math.Log(sum)
		total += lse - float64(row[labels[i]])
		scale := float32(inv / sum)
		for j := range drow {
			drow[j] *= scale
		}
		drow[labels[i]] -= float32(inv)
	}
	return float32(total * inv), d, nil
}

// AppendSoftmax appends the softmax of logits to dst, in float64 and from
// the largest logit, so that large logits do not overflow: what predict
// writes and what the exports are checked against.
func AppendSoftmax(dst []float32, logits []float32) []float32 {
	mx := math.Inf(-1)
	for _, v := range logits {
		mx = math.Max(mx, float64(v))
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) - mx)
	}
	for _, v := range logits {
		dst = append(dst, float32(math.Exp(float64(v)-mx)/sum))
	}
	return dst
}

// Argmax returns the index of the largest value in v (the first on ties),
// or -1 for an empty slice.
func Argmax(v []float32) int {
	if len(v) == 0 {
		return -1
	}
	best := 0
	for i, x := range v[1:] {
		if x > v[best] {
			best = i + 1
		}
	}
	return best
}

// Predict returns the argmax class of each row of logits [N,K].
func Predict(logits *Tensor) []int32 {
	n, k := logits.Shape[0], logits.Shape[1]
	out := make([]int32, n)
	for i := range out {
		out[i] = int32(Argmax(logits.Data[i*k : (i+1)*k]))
	}
	return out
}

// CountCorrect returns how many rows of logits [N,K] have their argmax
// equal to the label. Rows beyond len(labels) are ignored.
func CountCorrect(logits *Tensor, labels []int32) int {
	k := logits.Shape[len(logits.Shape)-1]
	n := min(len(labels), logits.Len()/max(k, 1))
	c := 0
	for i := 0; i < n; i++ {
		if int32(Argmax(logits.Data[i*k:(i+1)*k])) == labels[i] {
			c++
		}
	}
	return c
}
