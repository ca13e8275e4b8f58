package data

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

func newCTR(t testing.TB, cfg CTRConfig) *SyntheticCTR {
	t.Helper()
	g, err := NewSyntheticCTR(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func readCTR(t testing.TB, g *SyntheticCTR, start, end int64) *Batch {
	t.Helper()
	b, err := g.Read(start, end)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestSyntheticCTRDeterministic(t *testing.T) {
	cfg := DefaultCTRConfig()
	cfg.Records = 5000
	a := readCTR(t, newCTR(t, cfg), 1000, 1500)
	b := readCTR(t, newCTR(t, cfg), 1000, 1500)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two generators of one config read different records")
	}
	if a.N != 500 || len(a.Features) != 500*13 || len(a.Categorical) != 500*26 || a.NumCategorical != 26 ||
		!slices.Equal(a.FeatureShape, []int{13}) || a.Index[0] != 1000 || a.Index[499] != 1499 || len(a.Corrupt) != 0 {
		t.Fatalf("batch shape: N %d features %d ids %d index [%d..%d]", a.N, len(a.Features), len(a.Categorical), a.Index[0], a.Index[a.N-1])
	}

	cfg.Seed = 2
	c := readCTR(t, newCTR(t, cfg), 1000, 1500)
	sameF, sameID, sameL := 0, 0, 0
	for i := range a.Features {
		if a.Features[i] == c.Features[i] {
			sameF++
		}
	}
	for i := range a.Categorical {
		if a.Categorical[i] == c.Categorical[i] {
			sameID++
		}
	}
	for i := range a.Labels {
		if a.Labels[i] == c.Labels[i] {
			sameL++
		}
	}
	// Ids repeat by chance (hot values), labels agree often (most are 0);
	// the bounds are far above chance for ids and far below identity.
	if sameF > 0 || sameID > len(a.Categorical)/2 || sameL == len(a.Labels) {
		t.Errorf("seeds 1 and 2 agree on %d/%d features, %d/%d ids, %d/%d labels",
			sameF, len(a.Features), sameID, len(a.Categorical), sameL, len(a.Labels))
	}
}

// TestSyntheticCTRRandomAccess checks that a record does not depend on the
// range it is read in: ranges of random sizes in random order, and single
// records via TrueProbability, agree with one sequential read.
func TestSyntheticCTRRandomAccess(t *testing.T) {
	cfg := DefaultCTRConfig()
	cfg.Records = 3000
	cfg.Dense = 5 // odd: the last Box-Muller pair is half used
	g := newCTR(t, cfg)
	all := readCTR(t, g, 0, g.Len())
	rng := rand.New(rand.NewPCG(3, 4))
	var cuts []int64
	for lo := int64(0); lo < g.Len(); lo += 1 + rng.Int64N(300) {
		cuts = append(cuts, lo)
	}
	cuts = append(cuts, g.Len())
	order := rng.Perm(len(cuts) - 1)
	nd, nc := int64(cfg.Dense), int64(cfg.Categorical)
	for _, k := range order {
		lo, hi := cuts[k], cuts[k+1]
		b := readCTR(t, g, lo, hi)
		if !slices.Equal(b.Features, all.Features[lo*nd:hi*nd]) || !slices.Equal(b.Categorical, all.Categorical[lo*nc:hi*nc]) ||
			!slices.Equal(b.Labels, all.Labels[lo:hi]) || !slices.Equal(b.Index, all.Index[lo:hi]) {
			t.Fatalf("Read(%d,%d) differs from the same records of Read(0,%d)", lo, hi, g.Len())
		}
	}
	if b := readCTR(t, g, 10, 10); b.N != 0 || len(b.Features) != 0 {
		t.Errorf("empty range: %+v", b)
	}
	// Labels follow the true probability: p is higher on positives.
	var pPos, pNeg float64
	var nPos int
	for i, l := range all.Labels {
		p := g.TrueProbability(int64(i))
		if !(p > 0 && p < 1) {
			t.Fatalf("TrueProbability(%d) = %v", i, p)
		}
		if l == 1 {
			pPos += p
			nPos++
		} else {
			pNeg += p
		}
	}
	if mp, mn := pPos/float64(nPos), pNeg/float64(len(all.Labels)-nPos); mp < mn+0.1 {
		t.Errorf("mean true p of positives %.3f vs negatives %.3f: labels do not follow p", mp, mn)
	}
}

// TestSyntheticCTRParts checks the documented independence of the parts of
// a record: Dense does not change ids or the label's draw, and Pairs changes
// only the probabilities.
func TestSyntheticCTRParts(t *testing.T) {
	cfg := DefaultCTRConfig()
	cfg.Records = 200
	base := readCTR(t, newCTR(t, cfg), 0, 200)
	fewer := cfg
	fewer.Dense = 4
	if b := readCTR(t, newCTR(t, fewer), 0, 200); !slices.Equal(b.Categorical, base.Categorical) ||
		!slices.Equal(b.Features[:4], base.Features[:4]) {
		t.Error("changing Dense changed the ids or the first dense features")
	}
	noPairs := cfg
	noPairs.Pairs = 0
	g0, g3 := newCTR(t, noPairs), newCTR(t, cfg)
	b := readCTR(t, g0, 0, 200)
	if !slices.Equal(b.Categorical, base.Categorical) || !slices.Equal(b.Features, base.Features) {
		t.Error("changing Pairs changed the features")
	}
	differ := 0
	for i := range int64(200) {
		if g0.TrueProbability(i) != g3.TrueProbability(i) {
			differ++
		}
	}
	if differ < 190 {
		t.Errorf("the pair interactions change only %d/200 probabilities", differ)
	}
}

func TestSyntheticCTRDistributions(t *testing.T) {
	cfg := DefaultCTRConfig()
	cfg.Records = 50_000
	g := newCTR(t, cfg)
	b := readCTR(t, g, 0, g.Len())
	n := float64(b.N)
	// Dense features are standard normal.
	for _, d := range []int{0, 12} {
		var sum, sq float64
		for k := range b.N {
			v := float64(b.Features[k*cfg.Dense+d])
			sum += v
			sq += v * v
		}
		if mean, variance := sum/n, sq/n-(sum/n)*(sum/n); math.Abs(mean) > 0.02 || math.Abs(variance-1) > 0.03 {
			t.Errorf("dense %d: mean %.4f variance %.4f, want 0 and 1", d, mean, variance)
		}
	}
	// Field f's ids are f*Vocab + value, and value 0 has probability
	// F(2) = (2^(1-s) - 1) / ((V+1)^(1-s) - 1) of the density x^-s on [1,V+1).
	s, v := cfg.Zipf, float64(cfg.Vocab)
	want0 := (math.Pow(2, 1-s) - 1) / (math.Pow(v+1, 1-s) - 1)
	want1 := (math.Pow(3, 1-s)-1)/(math.Pow(v+1, 1-s)-1) - want0
	for _, f := range []int{0, 25} {
		var hot0, hot1, distinct int
		seen := map[int64]bool{}
		for k := range b.N {
			id := b.Categorical[k*cfg.Categorical+f]
			if id < int64(f)*cfg.Vocab || id >= int64(f+1)*cfg.Vocab {
				t.Fatalf("record %d field %d: id %d outside [%d,%d)", k, f, id, int64(f)*cfg.Vocab, int64(f+1)*cfg.Vocab)
			}
			switch id - int64(f)*cfg.Vocab {
			case 0:
				hot0++
			case 1:
				hot1++
			}
			if !seen[id] {
				seen[id] = true
				distinct++
			}
		}
		if got := float64(hot0) / n; math.Abs(got-want0) > 0.006 {
			t.Errorf("field %d: value 0 in %.4f of records, want %.4f", f, got, want0)
		}
		if got := float64(hot1) / n; math.Abs(got-want1) > 0.005 {
			t.Errorf("field %d: value 1 in %.4f of records, want %.4f", f, got, want1)
		}
		if distinct < 3000 { // a long tail, not a handful of values
			t.Errorf("field %d: only %d distinct ids in %d records", f, distinct, b.N)
		}
	}
	if g.IDBound() != 26*10_000 {
		t.Errorf("IDBound = %d", g.IDBound())
	}
}

// TestSyntheticCTRZipfTable checks that the table that skips the inverse
// CDF gives the formula's value, for exponents on both sides of 1 and at it.
func TestSyntheticCTRZipfTable(t *testing.T) {
	for _, zipf := range []float64{0, 0.7, 1, 1 + 1e-12, 1.1, 2.5} {
		cfg := DefaultCTRConfig()
		cfg.Zipf = zipf
		cfg.Vocab = 1000
		g := newCTR(t, cfg)
		rng := rand.New(rand.NewPCG(5, 6))
		hits := 0
		for range 20_000 {
			u := rng.Float64()
			want := min(max(int64(g.zipfX(u)), 1), cfg.Vocab) - 1
			if got := g.zipf(u); got != want {
				t.Fatalf("zipf %v: u=%v gives %d, the formula %d", zipf, u, got, want)
			}
			if g.zipfCells[int(u*zipfCellCount)] >= 0 {
				hits++
			}
		}
		if hits < 10_000 {
			t.Errorf("zipf %v: the table answers only %d/20000 draws", zipf, hits)
		}
		if v := g.zipf(math.Nextafter(1, 0)); v != cfg.Vocab-1 {
			t.Errorf("zipf %v: the largest u gives %d, want %d", zipf, v, cfg.Vocab-1)
		}
	}
}

// TestSyntheticCTRLabelRateAndCeiling checks the positive rate and ceiling
// AUC against the values documented for the default configuration (measured
// there on 1M records; here on fewer, hence the tolerance).
func TestSyntheticCTRLabelRateAndCeiling(t *testing.T) {
	const n = 100_000
	g := newCTR(t, DefaultCTRConfig())
	b := readCTR(t, g, 0, n)
	var pos int
	for _, l := range b.Labels {
		pos += int(l)
	}
	rate := float64(pos) / n
	ceiling := CeilingAUC(g, n)
	t.Logf("default config, first %d records: positive rate %.4f, ceiling AUC %.4f", n, rate, ceiling)
	if rate < 0.2 || rate > 0.3 || math.Abs(rate-0.253) > 0.008 {
		t.Errorf("positive rate %.4f, documented 0.253", rate)
	}
	if ceiling < 0.75 || ceiling > 0.85 || math.Abs(ceiling-0.801) > 0.008 {
		t.Errorf("ceiling AUC %.4f, documented 0.801", ceiling)
	}
	// CeilingAUC is the AUC of TrueProbability against Read's labels.
	scores := make([]float64, 2000)
	for i := range scores {
		scores[i] = g.TrueProbability(int64(i))
	}
	if got, want := CeilingAUC(g, 2000), AUC(scores, b.Labels[:2000]); got != want {
		t.Errorf("CeilingAUC(2000) = %v, AUC of TrueProbability and labels = %v", got, want)
	}
	if !math.IsNaN(CeilingAUC(g, 0)) {
		t.Error("CeilingAUC of no records is not NaN")
	}
}

func TestSyntheticCTRHuge(t *testing.T) {
	cfg := DefaultCTRConfig()
	cfg.Records = 100_000_000
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	t0 := time.Now()
	g := newCTR(t, cfg)
	elapsed := time.Since(t0)
	runtime.ReadMemStats(&after)
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1<<20 {
		t.Errorf("opening 100M records allocated %d bytes", alloc)
	}
	if elapsed > time.Second {
		t.Errorf("opening 100M records took %v", elapsed)
	}
	b := readCTR(t, g, cfg.Records-5, cfg.Records)
	if b.N != 5 || b.Index[4] != cfg.Records-1 {
		t.Errorf("reading the last records: %+v", b)
	}
	if _, err := g.Read(cfg.Records-1, cfg.Records+1); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("reading past the end: %v", err)
	}
	cfg.Records = math.MaxInt64
	g = newCTR(t, cfg)
	if b := readCTR(t, g, math.MaxInt64-3, math.MaxInt64); b.N != 3 {
		t.Errorf("reading the last of MaxInt64 records: %+v", b)
	}
	if _, err := g.Read(0, 1<<40); err == nil || !strings.Contains(err.Error(), "too many for one batch") {
		t.Errorf("Read of 2^40 records: %v", err)
	}
}

func TestSyntheticCTRURI(t *testing.T) {
	src, err := Open("synthetic-ctr://")
	if err != nil {
		t.Fatal(err)
	}
	g, ok := src.(*SyntheticCTR)
	if !ok || g.Config() != DefaultCTRConfig() || g.Name() != "synthetic-ctr://" || g.Len() != 1_000_000 ||
		!slices.Equal(g.FeatureShape(), []int{13}) || g.NumCategorical() != 26 {
		t.Fatalf("Open(synthetic-ctr://) = %T %+v", src, src)
	}
	uri := "synthetic-ctr://?records=1000&dense=3&categorical=4&vocab=50&zipf=0.5&pairs=2&seed=9"
	g, err = OpenSyntheticCTR(uri)
	want := CTRConfig{Records: 1000, Dense: 3, Categorical: 4, Vocab: 50, Zipf: 0.5, Pairs: 2, Seed: 9}
	if err != nil || g.Config() != want || g.Name() != uri {
		t.Fatalf("OpenSyntheticCTR(%q) = %+v, %v", uri, g, err)
	}
	// A config's URI opens the same generator, with the same records.
	g2, err := OpenSyntheticCTR(want.URI())
	if err != nil || g2.Config() != want || !reflect.DeepEqual(readCTR(t, g, 900, 1000), readCTR(t, g2, 900, 1000)) {
		t.Fatalf("URI %q does not round-trip: %v", want.URI(), err)
	}
	if g3 := newCTR(t, want); g3.Name() != want.URI() {
		t.Errorf("NewSyntheticCTR name %q, want %q", g3.Name(), want.URI())
	}

	for _, tc := range []struct{ uri, want string }{
		{"synthetic-ctr://?rows=5", `unknown parameter "rows"`},
		{"synthetic-ctr://?records=1e6", `records="1e6": want a number`},
		{"synthetic-ctr://?records=0", "records = 0: want at least 1"},
		{"synthetic-ctr://?records=-5", "records = -5"},
		{"synthetic-ctr://?dense=0&categorical=0&pairs=0", "a record needs at least one feature"},
		{"synthetic-ctr://?categorical=3", "pairs = 3: want 0 to categorical/2 = 1"},
		{"synthetic-ctr://?vocab=0", "vocab = 0"},
		{"synthetic-ctr://?zipf=NaN", "zipf = NaN"},
		{"synthetic-ctr://?zipf=-1", "zipf = -1"},
		{"synthetic-ctr://?seed=-1", `seed="-1"`},
		{"synthetic-ctr://?dense=10001", "dense = 10001"},
		{"synthetic-ctr://?seed=1&seed=2", `parameter "seed" given 2 times`},
		{"synthetic-ctr://host?seed=1", `unexpected "host" before '?'`},
		{"synthetic-ctr://?seed=%zz", "query"},
	} {
		src, err := Open(tc.uri)
		if src != nil || err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), tc.uri) {
			t.Errorf("Open(%q) = %v, %v; want an error naming the URI and containing %q", tc.uri, src, err, tc.want)
		}
	}
	if _, err := NewSyntheticCTR(CTRConfig{}); err == nil {
		t.Error("the zero CTRConfig was accepted")
	}
}

func TestSyntheticCTRClose(t *testing.T) {
	g := newCTR(t, DefaultCTRConfig())
	done := make(chan struct{})
	go func() { // Reads racing with Close: either result is fine, a data race is not
		defer close(done)
		for range 20 {
			if _, err := g.Read(0, 10); err != nil && !errors.Is(err, os.ErrClosed) {
				t.Error(err)
			}
		}
	}()
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	<-done
	if _, err := g.Read(0, 1); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Read after Close: %v", err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// Permute moves whole records (features, ids, label, index), reuses the
// scratch it is given, and hands back the features' old buffer.
func TestBatchPermute(t *testing.T) {
	cfg := DefaultCTRConfig()
	cfg.Records, cfg.Dense, cfg.Categorical, cfg.Pairs = 10, 3, 2, 1
	g := newCTR(t, cfg)
	b := readCTR(t, g, 0, 10)
	ref := readCTR(t, g, 0, 10)
	perm := []int{0, 1, 7, 3, 4, 5, 6, 2, 9, 8}
	old := b.Features
	scratch := make([]float32, 40)
	spare := b.Permute(perm, scratch)
	if &spare[0] != &old[0] || &b.Features[0] != &scratch[0] {
		t.Errorf("Permute did not gather into the scratch and hand back the old buffer")
	}
	for k, i := range perm {
		if b.Index[k] != int64(i) || b.Labels[k] != ref.Labels[i] ||
			!slices.Equal(b.Features[k*3:k*3+3], ref.Features[i*3:i*3+3]) ||
			!slices.Equal(b.Categorical[k*2:k*2+2], ref.Categorical[i*2:i*2+2]) {
			t.Fatalf("position %d does not hold record %d whole", k, i)
		}
	}
	// A batch without ids or index moves what it has; a short scratch
	// grows.
	plain := &Batch{N: 2, Features: []float32{1, 2, 3, 4}, Labels: []int32{5, 6}}
	plain.Permute([]int{1, 0}, make([]float32, 1))
	if !slices.Equal(plain.Features, []float32{3, 4, 1, 2}) || !slices.Equal(plain.Labels, []int32{6, 5}) {
		t.Errorf("plain batch after Permute: %+v", plain)
	}
}

// BenchmarkSyntheticCTRRead measures generation of the default
// configuration, 4096 records per Read, in records per second per core.
func BenchmarkSyntheticCTRRead(b *testing.B) {
	g := newCTR(b, DefaultCTRConfig())
	const batch = 4096
	var start int64
	for b.Loop() {
		if _, err := g.Read(start, start+batch); err != nil {
			b.Fatal(err)
		}
		start = (start + batch) % (g.Len() - batch)
	}
	b.ReportMetric(float64(b.N)*batch/b.Elapsed().Seconds(), "records/s")
}

// TestSyntheticCTROffset: offset=K shifts the records of the same hidden
// model, so records [K, K+n) of a long source are the records of
// records=n&offset=K.
func TestSyntheticCTROffset(t *testing.T) {
	long, err := OpenSyntheticCTR("synthetic-ctr://?records=3000&seed=5")
	if err != nil {
		t.Fatal(err)
	}
	short, err := OpenSyntheticCTR("synthetic-ctr://?records=1000&offset=2000&seed=5")
	if err != nil {
		t.Fatal(err)
	}
	a, err := long.Read(2000, 3000)
	if err != nil {
		t.Fatal(err)
	}
	b, err := short.Read(0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Features, b.Features) || !slices.Equal(a.Categorical, b.Categorical) || !slices.Equal(a.Labels, b.Labels) {
		t.Error("records=1000&offset=2000 differ from records [2000, 3000)")
	}
	if long.TrueProbability(2017) != short.TrueProbability(17) {
		t.Error("TrueProbability ignores the offset")
	}
	cfg := short.Config()
	if cfg.Offset != 2000 || !strings.Contains(cfg.URI(), "&offset=2000") || strings.Contains(long.Config().URI(), "offset") {
		t.Errorf("URIs %q, %q", cfg.URI(), long.Config().URI())
	}
	if _, err := OpenSyntheticCTR("synthetic-ctr://?offset=-1"); err == nil {
		t.Error("negative offset: no error")
	}
}
