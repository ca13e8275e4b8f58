package e2e

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// ---- statistics -----------------------------------------------------------------------------------

func scalePct(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(i, 0)]
}

func scaleMs(d time.Duration) string {
	return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
}

// scaleDist is "n=N p50=… p99=… max=…".
func scaleDist(d []time.Duration) string {
	if len(d) == 0 {
		return "n=0"
	}
	return fmt.Sprintf("n=%d p50=%s p99=%s max=%s", len(d), scaleMs(scalePct(d, .5)), scaleMs(scalePct(d, .99)), scaleMs(scalePct(d, 1)))
}
