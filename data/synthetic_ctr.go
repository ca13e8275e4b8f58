package data

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
)

const syntheticCTRScheme = "synthetic-ctr"

// CTRConfig configures NewSyntheticCTR. Start from DefaultCTRConfig: the
// zero value of a field is a valid setting (no dense features, say), not
// "default".
type CTRConfig struct {
	Records     int64   // Len(), at least 1; nothing proportional to it is allocated
	Dense       int     // dense features per record, 0 to 10000
	Categorical int     // categorical fields per record, 0 to 10000 (Dense+Categorical >= 1)
	Vocab       int64   // distinct ids per field, 1 to 2^40
	Zipf        float64 // exponent of the id distribution, 0 (uniform) to 10; larger is hotter
	Pairs       int     // field pairs (0,1), (2,3), ... that interact in the hidden model, at most Categorical/2
	Seed        uint64  // picks the hidden model and the records
	// Offset shifts the records: record i is the generator's record
	// Offset+i (same hidden model), so that held-out data is the records
	// after a training range, e.g. records=20000&offset=100000.
	Offset int64
}

// DefaultCTRConfig is the configuration of a bare "synthetic-ctr://" URI:
// 1M records shaped like the Criteo display-ads data (13 dense features, 26
// categorical fields), 10000 ids per field with Zipf exponent 1.1 (the hottest
// id of a field is in about 11% of the records), three interacting pairs,
// seed 1.
func DefaultCTRConfig() CTRConfig {
	return CTRConfig{Records: 1_000_000, Dense: 13, Categorical: 26, Vocab: 10_000, Zipf: 1.1, Pairs: 3, Seed: 1}
}

const (
	maxCTRWidth = 10_000  // Dense and Categorical: keeps the per-record draw numbers apart (see record)
	maxCTRVocab = 1 << 40 // so that Categorical*Vocab ids fit an int64
)

// Validate checks the configuration; errors name the field.
func (c CTRConfig) Validate() error {
	switch {
	case c.Records < 1:
		return fmt.Errorf("records = %d: want at least 1", c.Records)
	case c.Dense < 0 || c.Dense > maxCTRWidth:
		return fmt.Errorf("dense = %d: want 0 to %d", c.Dense, maxCTRWidth)
	case c.Categorical < 0 || c.Categorical > maxCTRWidth:
		return fmt.Errorf("categorical = %d: want 0 to %d", c.Categorical, maxCTRWidth)
	case c.Dense+c.Categorical == 0:
		return errors.New("dense = categorical = 0: a record needs at least one feature")
	case c.Vocab < 1 || c.Vocab > maxCTRVocab:
		return fmt.Errorf("vocab = %d: want 1 to 2^40", c.Vocab)
	case !(c.Zipf >= 0 && c.Zipf <= 10): // also catches NaN
		return fmt.Errorf("zipf = %v: want 0 to 10", c.Zipf)
	case c.Pairs < 0 || c.Pairs > c.Categorical/2:
		return fmt.Errorf("pairs = %d: want 0 to categorical/2 = %d", c.Pairs, c.Categorical/2)
	case c.Offset < 0 || c.Offset > math.MaxInt64-c.Records:
		return fmt.Errorf("offset = %d: want 0 to 2^63-1-records", c.Offset)
	}
	return nil
}

// URI returns the synthetic-ctr:// URI of the configuration, which Open
// turns back into the same generator.
func (c CTRConfig) URI() string {
	u := fmt.Sprintf("%s://?records=%d&dense=%d&categorical=%d&vocab=%d&zipf=%s&pairs=%d&seed=%d",
		syntheticCTRScheme, c.Records, c.Dense, c.Categorical, c.Vocab,
		strconv.FormatFloat(c.Zipf, 'g', -1, 64), c.Pairs, c.Seed)
	if c.Offset != 0 {
		u += fmt.Sprintf("&offset=%d", c.Offset)
	}
	return u
}

// Hidden model: the share of the logit's variance each part carries, and
// the bias. Normalizing each part to a fixed variance keeps the difficulty
// about the same whatever the numbers of features; the values were tuned for
// a ceiling AUC near 0.8 and a positive rate near 25% (see SyntheticCTR).
const (
	ctrBias     = -1.45
	ctrVarDense = 0.5
	ctrVarCat   = 1.0
	ctrVarPairs = 0.4
	ctrLatent   = 4 // latent dimensions of a pair interaction: 16-bit parts of one 64-bit draw
)

// Per-record draw numbers (see record): dense features use 0, 1, ...; the
// categorical fields and the label start far enough apart that changing
// Dense does not change the ids or labels' randomness.
const (
	drawCat   = 1 << 20
	drawLabel = 1 << 21
)

// SyntheticCTR generates click-through-rate records with no files: dense
// features, categorical ids and a 0/1 label drawn from a hidden model whose
// click probability is known for every record, so the best AUC any model
// can reach is known (CeilingAUC).
//
// Record i is a pure function of (Seed, i): every random draw is SplitMix64's
// output function applied to a counter keyed by the seed, the record and the
// draw's number, so any range can be read in any order, by any number of
// workers, and gives the same records. Float results are bit-identical on
// one GOARCH; across architectures, math functions may differ in the last
// bit, which can rarely move an id or a label.
//
// A record has Dense features, each standard normal (Box-Muller), and
// Categorical ids: field f's value v in [0, Vocab) has id f*Vocab + v, so
// ids are in [0, Categorical*Vocab) (IDBound) and fields never share one.
// Values follow a Zipf-like law: v = floor(x)-1 where x has density
// proportional to x^-Zipf on [1, Vocab+1), drawn by inverse CDF; value 0 is
// the hottest of every field.
//
// The hidden model is logistic:
//
//	logit = -1.45 + Σ_d w_d·dense_d + Σ_f e_f(v_f) + Σ_k λ·<a_2k(v_2k), a_2k+1(v_2k+1)>
//
// where the weights w_d, the per-value effects e_f(v) (uniform, with a
// random scale per field, so some fields matter more than others, and
// centered on the field's hot values) and the latent vectors a_f(v) in
// [-1,1)^4 of the Pairs interacting fields are functions of the seed, scaled
// so the three sums have variances of about 0.5, 1.0 and 0.4. The
// interactions are what a factorization machine can find and a linear model
// cannot. The click probability is p = sigmoid(logit), computed from the
// float32 features a model sees, and the label is 1 with probability p.
//
// For DefaultCTRConfig, 25.3% of labels are 1, and the AUC of ranking
// by the true p (CeilingAUC over the first 1M records) is 0.801: a perfect
// model's AUC, a target for real ones.
type SyntheticCTR struct {
	name string
	cfg  CTRConfig

	recordsKey uint64
	w          []float64 // dense weights
	embKey     []uint64  // per field: keys its value effects
	embScale   []float64 // per field: the scale of its value effects
	embShift   []float64 // per field: subtracted from its effects, see headMean
	pairKey    []uint64  // per field of a pair: keys its latent vectors
	pairScale  float64   // λ, including the 2^-30 of the 16-bit latent parts

	// Zipf inverse CDF: x = exp(log1p(u*zipfC) / zipfT), or (Vocab+1)^u if zipfT is ~0.
	zipfT, zipfC, zipfLog float64
	// zipfCells[k] is the value of every u in [k, k+1)/zipfCellCount when
	// they all floor to one value, else -1. Most draws land in such a cell
	// (the hot values are wide), which skips the exp and log1p that would
	// otherwise take most of the generator's time.
	zipfCells []int32

	closed atomic.Bool
}

// NewSyntheticCTR returns the generator of cfg; its Name is cfg.URI(). It
// allocates O(Dense+Categorical) and a fixed 256 KB table, whatever Records
// is, so opening even 2^63-1 records takes milliseconds.
func NewSyntheticCTR(cfg CTRConfig) (*SyntheticCTR, error) {
	return newSyntheticCTR(cfg.URI(), cfg)
}

func newSyntheticCTR(name string, cfg CTRConfig) (*SyntheticCTR, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	seedKey := mix64(cfg.Seed + splitmixGamma)
	model := draw(seedKey, 1)
	g := &SyntheticCTR{
		name:       name,
		cfg:        cfg,
		recordsKey: draw(seedKey, 0),
		w:          make([]float64, cfg.Dense),
		embKey:     make([]uint64, cfg.Categorical),
		embScale:   make([]float64, cfg.Categorical),
		pairKey:    make([]uint64, 2*cfg.Pairs),
	}
	var sum float64
	for d := range g.w {
		g.w[d], _ = gaussPair(draw(draw(model, 0), uint64(d)))
		sum += g.w[d] * g.w[d]
	}
	for d := range g.w {
		g.w[d] *= math.Sqrt(ctrVarDense / sum) // dense features have variance 1
	}
	sum = 0
	for f := range g.embScale {
		g.embKey[f] = draw(draw(model, 2), uint64(f))
		g.embScale[f] = 0.1 + unit(draw(draw(model, 3), uint64(f)))
		sum += g.embScale[f] * g.embScale[f] / 3 // a uniform effect in [-c,c) has variance c²/3
	}
	for f := range g.embScale {
		g.embScale[f] *= math.Sqrt(ctrVarCat / sum)
	}
	g.zipfT = 1 - cfg.Zipf
	g.zipfLog = math.Log(float64(cfg.Vocab) + 1)
	g.zipfC = math.Expm1(g.zipfT * g.zipfLog)
	g.embShift = make([]float64, cfg.Categorical)
	for f := range g.embShift {
		g.embShift[f] = g.headMean(f)
	}
	for f := range g.pairKey {
		g.pairKey[f] = draw(draw(model, 4), uint64(f))
	}
	if cfg.Pairs > 0 {
		// Each latent part is uniform in [-1,1) (variance 1/3), so a dot
		// product of ctrLatent parts has variance ctrLatent/9.
		g.pairScale = math.Sqrt(ctrVarPairs*9/(ctrLatent*float64(cfg.Pairs))) * 0x1p-30
	}
	g.zipfCells = make([]int32, zipfCellCount)
	lo := g.zipfX(0)
	for k := range g.zipfCells {
		hi := g.zipfX(float64(k+1) / zipfCellCount)
		// The margin keeps the cell's answer equal to the formula's even if
		// rounding made the computed x not quite monotone.
		r := math.Floor(lo)
		if lo-r >= 1e-6 && hi < r+1-1e-6 && r <= math.MaxInt32 {
			g.zipfCells[k] = int32(min(max(int64(r), 1), g.cfg.Vocab) - 1)
		} else {
			g.zipfCells[k] = -1
		}
		lo = hi
	}
	return g, nil
}

const zipfCellCount = 1 << 16 // 256 KB of zipfCells; enough that ~85% of draws skip the formula by default

// OpenSyntheticCTR opens a generator named by a URI of the form
//
//	synthetic-ctr://?records=N&dense=N&categorical=N&vocab=N&zipf=S&pairs=N&seed=N&offset=N
//
// Every parameter is optional and defaults to DefaultCTRConfig's value
// (records=1000000&dense=13&categorical=26&vocab=10000&zipf=1.1&pairs=3&seed=1&offset=0);
// see CTRConfig for their meaning and ranges. Unknown parameters are errors.
// The source's Name is the URI, so workers that open it get the same records.
func OpenSyntheticCTR(uri string) (*SyntheticCTR, error) {
	rest, ok := strings.CutPrefix(uri, syntheticCTRScheme+"://")
	if !ok {
		return nil, fmt.Errorf("%s: not a %s:// URI", uri, syntheticCTRScheme)
	}
	host, query, _ := strings.Cut(rest, "?")
	if host != "" {
		return nil, fmt.Errorf("%s: unexpected %q before '?': want %s://?records=N&...", uri, host, syntheticCTRScheme)
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%s: query: %w", uri, err)
	}
	cfg := DefaultCTRConfig()
	ints := map[string]*int{"dense": &cfg.Dense, "categorical": &cfg.Categorical, "pairs": &cfg.Pairs}
	int64s := map[string]*int64{"records": &cfg.Records, "vocab": &cfg.Vocab, "offset": &cfg.Offset}
	for _, k := range slices.Sorted(maps.Keys(q)) { // sorted: the same URI always gives the same error
		if len(q[k]) != 1 {
			return nil, fmt.Errorf("%s: parameter %q given %d times", uri, k, len(q[k]))
		}
		v := q[k][0]
		var err error
		switch {
		case ints[k] != nil:
			*ints[k], err = strconv.Atoi(v)
		case int64s[k] != nil:
			*int64s[k], err = strconv.ParseInt(v, 10, 64)
		case k == "zipf":
			cfg.Zipf, err = strconv.ParseFloat(v, 64)
		case k == "seed":
			cfg.Seed, err = strconv.ParseUint(v, 10, 64)
		default:
			return nil, fmt.Errorf("%s: unknown parameter %q (want records, dense, categorical, vocab, zipf, pairs, seed, offset)", uri, k)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: parameter %s=%q: want a number: %w", uri, k, v, err)
		}
	}
	return newSyntheticCTR(uri, cfg)
}

// Name returns the URI the generator was opened with (NewSyntheticCTR:
// its configuration's URI).
func (g *SyntheticCTR) Name() string { return g.name }

// Len returns CTRConfig.Records.
func (g *SyntheticCTR) Len() int64 { return g.cfg.Records }

// FeatureShape returns [Dense].
func (g *SyntheticCTR) FeatureShape() []int { return []int{g.cfg.Dense} }

// NumCategorical returns CTRConfig.Categorical.
func (g *SyntheticCTR) NumCategorical() int { return g.cfg.Categorical }

// IDBound returns Categorical*Vocab: ids are in [0, IDBound()).
func (g *SyntheticCTR) IDBound() int64 { return int64(g.cfg.Categorical) * g.cfg.Vocab }

// Config returns the generator's configuration.
func (g *SyntheticCTR) Config() CTRConfig { return g.cfg }

// Read generates records [start,end). No record is ever corrupt.
func (g *SyntheticCTR) Read(start, end int64) (*Batch, error) {
	if err := checkRange(g.name, start, end, g.cfg.Records); err != nil {
		return nil, err
	}
	if g.closed.Load() {
		return nil, fmt.Errorf("%s: read: %w", g.name, os.ErrClosed)
	}
	// Len may be far beyond memory; fail a range no batch could hold rather
	// than let the allocation size overflow.
	if end-start > math.MaxInt32 {
		return nil, fmt.Errorf("%s: records [%d,%d): %d records is too many for one batch", g.name, start, end, end-start)
	}
	n, nd, nc := int(end-start), g.cfg.Dense, g.cfg.Categorical
	b := &Batch{
		N:              n,
		FeatureShape:   g.FeatureShape(),
		Features:       make([]float32, n*nd),
		Labels:         make([]int32, n),
		Index:          make([]int64, n),
		NumCategorical: nc,
		Categorical:    make([]int64, n*nc),
	}
	for k := range n {
		i := start + int64(k)
		_, b.Labels[k] = g.record(i, b.Features[k*nd:(k+1)*nd], b.Categorical[k*nc:(k+1)*nc])
		b.Index[k] = i
	}
	return b, nil
}

// Close makes later Reads fail; it is idempotent.
func (g *SyntheticCTR) Close() error {
	g.closed.Store(true)
	return nil
}

// TrueProbability returns the hidden model's click probability of record i:
// the probability that its label is 1. It is defined for every i, not just
// those below Len().
func (g *SyntheticCTR) TrueProbability(i int64) float64 {
	p, _ := g.record(i, make([]float32, g.cfg.Dense), make([]int64, g.cfg.Categorical))
	return p
}

// record writes record i's dense features and ids into dense and ids and
// returns its click probability and label.
func (g *SyntheticCTR) record(i int64, dense []float32, ids []int64) (float64, int32) {
	key := draw(g.recordsKey, uint64(g.cfg.Offset+i))
	logit := ctrBias
	for d := 0; d < len(dense); d += 2 {
		z0, z1 := gaussPair(draw(key, uint64(d/2)))
		dense[d] = float32(z0)
		logit += g.w[d] * float64(dense[d]) // the float32 value: p must depend only on what a model sees
		if d+1 < len(dense) {
			dense[d+1] = float32(z1)
			logit += g.w[d+1] * float64(dense[d+1])
		}
	}
	vocab := g.cfg.Vocab
	for f := range ids {
		v := g.zipf(unit(draw(key, drawCat+uint64(f))))
		ids[f] = int64(f)*vocab + v
		logit += g.effect(f, v) - g.embShift[f]
	}
	for k := range g.cfg.Pairs {
		a := draw(g.pairKey[2*k], uint64(ids[2*k]-int64(2*k)*vocab))
		b := draw(g.pairKey[2*k+1], uint64(ids[2*k+1]-int64(2*k+1)*vocab))
		var dot int64
		for j := 0; j < 64; j += 16 {
			dot += int64(int16(a>>j)) * int64(int16(b>>j)) // exact: each part is 2^15 times a value in [-1,1)
		}
		logit += g.pairScale * float64(dot)
	}
	p := 1 / (1 + math.Exp(-logit))
	var label int32
	if unit(draw(key, drawLabel)) < p {
		label = 1
	}
	return p, label
}

// effect is the hidden effect of value v of field f on the logit, before
// the shift.
func (g *SyntheticCTR) effect(f int, v int64) float64 {
	return g.embScale[f] * (2*unit(draw(g.embKey[f], uint64(v))) - 1)
}

// headMean returns the mean effect of field f's hottest values (at most
// zipfHead of them), weighted by their probabilities. Subtracting it centers
// the field: otherwise the few hot values, drawn once per seed, would shift
// every record's logit and the positive rate would swing with the seed.
func (g *SyntheticCTR) headMean(f int) float64 {
	var mean, below float64 // below: P(value < v)
	for v := range min(g.cfg.Vocab, zipfHead) {
		at := g.zipfCDF(float64(v + 2))
		mean += (at - below) * g.effect(f, v)
		below = at
	}
	return mean
}

const zipfHead = 1024

// zipfCDF is the CDF of the density x^-Zipf on [1, Vocab+1) at x, the
// inverse of zipfX.
func (g *SyntheticCTR) zipfCDF(x float64) float64 {
	if math.Abs(g.zipfT) < 1e-9 {
		return math.Log(x) / g.zipfLog
	}
	return math.Expm1(g.zipfT*math.Log(x)) / g.zipfC
}

// zipf maps u in [0,1) to a value in [0, Vocab) by the inverse CDF of the
// density x^-Zipf on [1, Vocab+1), floored. Written with expm1 and log1p so
// exponents near 1 stay accurate.
func (g *SyntheticCTR) zipf(u float64) int64 {
	if v := g.zipfCells[int(u*zipfCellCount)]; v >= 0 {
		return int64(v)
	}
	return min(max(int64(g.zipfX(u)), 1), g.cfg.Vocab) - 1
}

// zipfX is the inverse CDF of the density x^-Zipf on [1, Vocab+1).
func (g *SyntheticCTR) zipfX(u float64) float64 {
	if math.Abs(g.zipfT) < 1e-9 {
		return math.Exp(u * g.zipfLog)
	}
	return math.Exp(math.Log1p(u*g.zipfC) / g.zipfT)
}

// CeilingAUC returns the AUC of ranking records [0, min(n, Len())) by their
// true click probability against their labels: the best AUC a model can
// reach on them, up to sampling noise. It takes about a second per million
// records and 12 bytes per record.
func CeilingAUC(g *SyntheticCTR, n int64) float64 {
	n = min(n, g.Len())
	if n <= 0 {
		return math.NaN()
	}
	scores := make([]float64, n)
	labels := make([]int32, n)
	dense := make([]float32, g.cfg.Dense)
	ids := make([]int64, g.cfg.Categorical)
	for i := range n {
		scores[i], labels[i] = g.record(i, dense, ids)
	}
	return AUC(scores, labels)
}

// SplitMix64 (Steele, Lea, Flood 2014): a counter-based generator, so any
// draw can be computed directly from its key and number.
const splitmixGamma = 0x9e3779b97f4a7c15

func mix64(z uint64) uint64 {
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// draw returns output j of the SplitMix64 stream keyed by key; an output is
// also the key of a sub-stream.
func draw(key, j uint64) uint64 { return mix64(key + (j+1)*splitmixGamma) }

// unit maps a draw to [0,1) with 53 random bits.
func unit(h uint64) float64 { return float64(h>>11) * 0x1p-53 }

// gaussPair turns one draw into two independent standard normals
// (Box-Muller on its two 32-bit halves; u1 in (0,1] keeps the log finite).
func gaussPair(h uint64) (float64, float64) {
	u1 := (float64(h>>32) + 1) * 0x1p-32
	u2 := float64(uint32(h)) * 0x1p-32
	r := math.Sqrt(-2 * math.Log(u1))
	s, c := math.Sincos(2 * math.Pi * u2)
	return r * c, r * s
}
