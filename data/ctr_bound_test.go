package data

import (
	"math"
	"math/rand"
	"os"
	"strconv"
	"testing"
)

// TestCTRLearnableBound measures how close to the ceiling a model trained
// on the first N records of seed 1 can get on the next 20000, with oracle
// estimators that know the hidden model's dense weights and, optionally,
// its pair interactions exactly, and estimate each id's effect from the n
// times it occurs in training as a Bayes posterior mean would: the true
// effect shrunk by n·I·σ²/(n·I·σ² + 1) plus noise of variance 1/(n·I)
// (σ² the field's effect variance, I = 0.19 ≈ p(1−p) the Fisher
// information of one record at the base rate). No model can expect to
// beat the bound with interactions known. Run with
// ELASTICDL_CTR_BOUND=N (e.g. 1000000); ELASTICDL_CTR_BOUND_PARAMS adds
// generator parameters to the URI (e.g. "vocab=1000&zipf=1.2"; records,
// offset and seed are the test's). The figures are in
// docs/recommenders.md.
func TestCTRLearnableBound(t *testing.T) {
	v := os.Getenv("ELASTICDL_CTR_BOUND")
	if v == "" {
		t.Skip("set ELASTICDL_CTR_BOUND=N to measure")
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	const held, info = 20000, 0.19
	uri := "synthetic-ctr://?records=" + strconv.FormatInt(n+held, 10) + "&seed=1"
	if p := os.Getenv("ELASTICDL_CTR_BOUND_PARAMS"); p != "" {
		uri += "&" + p
	}
	g, err := OpenSyntheticCTR(uri)
	if err != nil {
		t.Fatal(err)
	}
	cfg := g.cfg
	counts := make([]int32, int64(cfg.Categorical)*cfg.Vocab)
	for s := int64(0); s < n; s += 50000 {
		b, err := g.Read(s, min(n, s+50000))
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range b.Categorical {
			counts[id]++
		}
	}
	b, err := g.Read(n, n+held)
	if err != nil {
		t.Fatal(err)
	}
	truth := make([]float64, held)
	for k := range int64(held) {
		truth[k] = g.TrueProbability(n + k)
	}
	F, D := int64(cfg.Categorical), int64(cfg.Dense)
	score := func(pairs bool) float64 {
		rng := rand.New(rand.NewSource(3))
		noise := map[int64]float64{}
		sc := make([]float64, held)
		for r := range int64(held) {
			ids := b.Categorical[r*F : (r+1)*F]
			logit := ctrBias
			for d := range D {
				logit += g.w[d] * float64(b.Features[r*D+d])
			}
			for f := range F {
				c := float64(counts[ids[f]])
				if c == 0 {
					logit -= g.embShift[f]
					continue
				}
				e, ok := noise[ids[f]]
				if !ok {
					e = rng.NormFloat64() / math.Sqrt(c*info)
					noise[ids[f]] = e
				}
				v := g.embScale[f] * g.embScale[f] / 3
				shrink := c * v * info / (c*v*info + 1)
				logit += shrink*(g.effect(int(f), ids[f]-f*cfg.Vocab)+e) - g.embShift[f]
			}
			if pairs {
				for k := range int64(cfg.Pairs) {
					a := draw(g.pairKey[2*k], uint64(ids[2*k]-2*k*cfg.Vocab))
					bb := draw(g.pairKey[2*k+1], uint64(ids[2*k+1]-(2*k+1)*cfg.Vocab))
					var dot int64
					for j := 0; j < 64; j += 16 {
						dot += int64(int16(a>>j)) * int64(int16(bb>>j))
					}
					logit += g.pairScale * float64(dot)
				}
			}
			sc[r] = logit
		}
		return AUC(sc, b.Labels)
	}
	t.Logf("%s, N=%d: ceiling %.4f; bound without interactions %.4f, with interactions known %.4f",
		uri, n, AUC(truth, b.Labels), score(false), score(true))
}
