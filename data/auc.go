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

// AUCBuckets is the number of equal-width score buckets of a
// ScoreHistogram built by NewScoreHistogram: scores in [0, 1] (click
// probabilities) fall in buckets of width 1e-4.
const AUCBuckets = 10000

// ScoreHistogram counts scores in [0, 1] per class in equal-width buckets,
// so that the AUC of a data set split over tasks can be computed from the
// tasks' histograms: merging is exact (integer counts) and the AUC of the
// merged histogram does not depend on the split. Within a bucket scores
// count as tied (half a pair), so the AUC differs from the exact one (AUC)
// by at most half the share of positive-negative pairs that fall in one
// bucket: for 10000 buckets and scores spread over a tenth of [0, 1] or
// more, well under 1e-3, and typically about 1e-5.
type ScoreHistogram struct {
	Positive, Negative []int64
}

// NewScoreHistogram returns an empty histogram of AUCBuckets buckets.
func NewScoreHistogram() *ScoreHistogram {
	return &ScoreHistogram{Positive: make([]int64, AUCBuckets), Negative: make([]int64, AUCBuckets)}
}

// Add counts score (clamped to [0, 1]; NaN is counted at 0) with its label:
// 0 is negative, any other label positive.
func (h *ScoreHistogram) Add(score float64, label int32) {
	n := len(h.Positive)
	b := 0
	if score >= 1 {
		b = n - 1
	} else if score > 0 {
		b = min(int(score*float64(n)), n-1)
	}
	if label != 0 {
		h.Positive[b]++
	} else {
		h.Negative[b]++
	}
}

// Merge adds o's counts to h; the two must have the same number of buckets.
func (h *ScoreHistogram) Merge(o *ScoreHistogram) error {
	if len(o.Positive) != len(h.Positive) || len(o.Negative) != len(h.Negative) {
		return fmt.Errorf("score histograms of %d/%d and %d/%d buckets", len(h.Positive), len(h.Negative), len(o.Positive), len(o.Negative))
	}
	for i, v := range o.Positive {
		h.Positive[i] += v
	}
	for i, v := range o.Negative {
		h.Negative[i] += v
	}
	return nil
}

// Validate checks that the histogram has as many positive as negative
// buckets, at least one, and no negative count.
func (h *ScoreHistogram) Validate() error {
	if len(h.Positive) == 0 || len(h.Positive) != len(h.Negative) {
		return fmt.Errorf("score histogram of %d positive and %d negative buckets", len(h.Positive), len(h.Negative))
	}
	for i := range h.Positive {
		if h.Positive[i] < 0 || h.Negative[i] < 0 {
			return fmt.Errorf("score histogram bucket %d has a negative count", i)
		}
	}
	return nil
}

// Count returns the number of scores counted.
func (h *ScoreHistogram) Count() int64 {
	var n int64
	for i := range h.Positive {
		n += h.Positive[i] + h.Negative[i]
	}
	return n
}

// AUC returns the area under the ROC curve of the counted scores, ties
// within a bucket counted as half; NaN without positives or negatives.
func (h *ScoreHistogram) AUC() float64 {
	var pairs, negBelow, pos float64 // pairs: times 2, as in AUC
	for i := range h.Positive {
		p, n := float64(h.Positive[i]), float64(h.Negative[i])
		pairs += p * (2*negBelow + n)
		negBelow += n
		pos += p
	}
	if pos == 0 || negBelow == 0 {
		return math.NaN()
	}
	return pairs / (2 * pos * negBelow)
}
