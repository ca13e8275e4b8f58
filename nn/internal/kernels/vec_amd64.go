//go:build amd64 && !purego

package kernels

//go:noescape
func addToAVX2(dst, src *float32, n int)

//go:noescape
func reluAVX2(dst, src *float32, n int)

//go:noescape
func reluGradAVX2(dx, dy, y *float32, n int)

// AddTo does dst[i] += src[i] for i < len(src) and reports true, or
// reports false when not Enabled (dst must be at least as long as src).
func AddTo(dst, src []float32) bool {
	if !Enabled {
		return false
	}
	if len(src) == 0 {
		return true
	}
	_ = dst[len(src)-1]
	addToAVX2(&dst[0], &src[0], len(src))
	return true
}

// ReLU sets dst[i] = src[i] with negative values and -0 replaced by +0
// (NaN passes unless its sign bit is set), for i < len(src), and reports
// true, or reports false when not Enabled.
func ReLU(dst, src []float32) bool {
	if !Enabled {
		return false
	}
	if len(src) == 0 {
		return true
	}
	_ = dst[len(src)-1]
	reluAVX2(&dst[0], &src[0], len(src))
	return true
}

// ReLUGrad sets dx[i] = dy[i] where y[i] (a ReLU output) is positive and
// +0 elsewhere, for i < len(dy), and reports true, or reports false when
// not Enabled.
func ReLUGrad(dx, dy, y []float32) bool {
	if !Enabled {
		return false
	}
	if len(dy) == 0 {
		return true
	}
	_ = dx[len(dy)-1]
	_ = y[len(dy)-1]
	reluGradAVX2(&dx[0], &dy[0], &y[0], len(dy))
	return true
}
