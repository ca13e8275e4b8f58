package data

import (
	"cmp"
	"fmt"
	"math"
	"slices"
)

// AUC returns the area under the ROC curve of scores against labels: the
// probability that a random positive record scores above a random negative
// one, counting ties as half (the Mann-Whitney statistic, with tied scores
// given their average rank). Label 0 is negative and any other label
// positive. It is NaN when there are no positives or no negatives, or when a
// score is NaN (a diverged model should not look like a bad one). It sorts a
// copy: O(n log n) time, 16 bytes per record. It panics if the lengths
// differ.
func AUC(scores []float64, labels []int32) float64 {
	if len(scores) != len(labels) {
		panic(fmt.Sprintf("data.AUC: %d scores but %d labels", len(scores), len(labels)))
	}
	type rec struct {
		score float64
		pos   bool
	}
	recs := make([]rec, len(scores))
	for i, s := range scores {
		if math.IsNaN(s) {
			return math.NaN()
		}
		recs[i] = rec{s, labels[i] != 0}
	}
	slices.SortFunc(recs, func(a, b rec) int { return cmp.Compare(a.score, b.score) })
	// Walk groups of equal scores from the lowest: each positive in a group
	// beats every negative below the group and ties with those in it.
	var pairs float64 // positive-negative pairs ordered right, ties counted 1/2, times 2 (kept integral)
	var negBelow, pos int64
	for i := 0; i < len(recs); {
		j := i
		var p, n int64
		for ; j < len(recs) && recs[j].score == recs[i].score; j++ {
			if recs[j].pos {
				p++
			} else {
				n++
			}
		}
		pairs += float64(p) * float64(2*negBelow+n)
		negBelow += n
		pos += p
		i = j
	}
	if pos == 0 || negBelow == 0 {
		return math.NaN()
	}
	return pairs / (2 * float64(pos) * float64(negBelow))
}
