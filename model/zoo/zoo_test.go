package zoo

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"elasticdl/model"
	"elasticdl/nn"
)

func TestRegister(t *testing.T) {
	r := model.NewRegistry()
	if err := Register(r); err != nil {
		t.Fatal(err)
	}
	if got := fmt.Sprint(r.Names()); got != "[ctr.deepfm ctr.wide_and_deep ctr.xdeepfm fashion_mnist.cnn fashion_mnist.cnn_wide fashion_mnist.mlp]" {
		t.Fatalf("Names() = %s", got)
	}
	if err := Register(r); err == nil {
		t.Error("registering the zoo twice succeeded")
	}
	for _, s := range r.Specs() {
		if err := s.CheckBuild(); err != nil {
			t.Errorf("%s: %v", s.Name, err)
		}
		if s.IsSparse() {
			continue // TestCTRSpecsRegister
		}
		if !strings.HasPrefix(s.Optimizer, "adam:learning_rate=0.00") || s.NumClasses != 10 || fmt.Sprint(s.InputShape) != "[28 28 1]" {
			t.Errorf("%s: unexpected spec %+v", s.Name, s)
		}
		// Same seed, same weights: workers rely on this to start in sync.
		a, b := s.Build(rand.New(rand.NewSource(7))), s.Build(rand.New(rand.NewSource(7)))
		for i, p := range a.Params() {
			q := b.Params()[i]
			if p.Name != q.Name || fmt.Sprint(p.Value.Data[:4]) != fmt.Sprint(q.Value.Data[:4]) {
				t.Errorf("%s: param %s differs between builds with the same seed", s.Name, p.Name)
			}
		}
	}
}

// --- Fashion-MNIST accuracy -------------------------------------------------

const fashionDir = "/usr/share/datasets/fashion-mnist"

// idxSet is a tiny in-test reader for the raw IDX files; images stay as
// bytes and are scaled to [0,1] per batch.
type idxSet struct {
	images []byte // n*784
	labels []byte
	n      int
}

func readIDX(path string, wantMagic uint32) (dims []int, data []byte, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read idx: %w", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(bufio.NewReader(f))
	if err != nil {
		return nil, nil, fmt.Errorf("read idx %s: %w", path, err)
	}
	var magic uint32
	if err := binary.Read(zr, binary.BigEndian, &magic); err != nil {
		return nil, nil, fmt.Errorf("read idx %s header: %w", path, err)
	}
	if magic != wantMagic {
		return nil, nil, fmt.Errorf("read idx %s: magic %#x, want %#x", path, magic, wantMagic)
	}
	size := 1
	for range magic & 0xff {
		var d uint32
		if err := binary.Read(zr, binary.BigEndian, &d); err != nil {
			return nil, nil, fmt.Errorf("read idx %s dims: %w", path, err)
		}
		dims = append(dims, int(d))
		size *= int(d)
	}
	data = make([]byte, size)
	if _, err := io.ReadFull(zr, data); err != nil {
		return nil, nil, fmt.Errorf("read idx %s body: %w", path, err)
	}
	return dims, data, nil
}

func loadFashion(t *testing.T, split string) *idxSet {
	t.Helper()
	img := filepath.Join(fashionDir, split+"-images-idx3-ubyte.gz")
	lbl := filepath.Join(fashionDir, split+"-labels-idx1-ubyte.gz")
	for _, p := range []string{img, lbl} {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			t.Skipf("Fashion-MNIST not available: %v", err)
		}
	}
	dims, images, err := readIDX(img, 0x803)
	if err != nil {
		t.Fatal(err)
	}
	ldims, labels, err := readIDX(lbl, 0x801)
	if err != nil {
		t.Fatal(err)
	}
	if len(dims) != 3 || dims[1] != 28 || dims[2] != 28 || ldims[0] != dims[0] {
		t.Fatalf("unexpected IDX dims %v / %v", dims, ldims)
	}
	return &idxSet{images: images, labels: labels, n: dims[0]}
}

// batch fills x [len(idx),28,28,1] and y with the records idx.
func (d *idxSet) batch(x *nn.Tensor, y []int32, idx []int) {
	for b, i := range idx {
		src := d.images[i*784 : (i+1)*784]
		dst := x.Data[b*784 : (b+1)*784]
		for j, v := range src {
			dst[j] = float32(v) / 255
		}
		y[b] = int32(d.labels[i])
	}
}

func evaluate(net *nn.Model, d *idxSet) float64 {
	const bs = 500
	x, y := nn.NewTensor(bs, 28, 28, 1), make([]int32, bs)
	idx := make([]int, bs)
	correct := 0
	for start := 0; start+bs <= d.n; start += bs {
		for i := range idx {
			idx[i] = start + i
		}
		d.batch(x, y, idx)
		correct += nn.CountCorrect(net.Forward(x, false), y)
	}
	return float64(correct) / float64(d.n/bs*bs)
}

// adam is a minimal Adam (Kingma & Ba) for the tests; the real optimizer
// lives in another package.
type adam struct {
	lr, b1, b2, eps float64
	t               int
	m, v            [][]float32
}

func newAdam(params []*nn.Param, lr float64) *adam {
	a := &adam{lr: lr, b1: 0.9, b2: 0.999, eps: 1e-7}
	for _, p := range params {
		a.m = append(a.m, make([]float32, p.Value.Len()))
		a.v = append(a.v, make([]float32, p.Value.Len()))
	}
	return a
}

func (a *adam) step(params []*nn.Param) {
	a.t++
	// Fold both bias corrections into the step size, as Keras does.
	alpha := float32(a.lr * math.Sqrt(1-math.Pow(a.b2, float64(a.t))) / (1 - math.Pow(a.b1, float64(a.t))))
	b1, b2, eps := float32(a.b1), float32(a.b2), float32(a.eps)
	for i, p := range params {
		m, v, g := a.m[i], a.v[i], p.Grad.Data
		for j, w := range p.Value.Data {
			m[j] = b1*m[j] + (1-b1)*g[j]
			v[j] = b2*v[j] + (1-b2)*g[j]*g[j]
			p.Value.Data[j] = w - alpha*m[j]/(float32(math.Sqrt(float64(v[j])))+eps)
		}
	}
}

// trainAdam trains spec's network for the given epochs with batch 64 and
// returns it. workers > 1 simulates asynchronous SGD: each gradient is
// computed on a replica whose weights are workers-1 updates stale, the
// staleness a parameter server sees with that many equally fast workers.
func trainAdam(t *testing.T, spec model.Spec, train *idxSet, epochs, workers int, seed int64) *nn.Model {
	t.Helper()
	const bs = 64
	rng := rand.New(rand.NewSource(seed))
	master := spec.Build(rand.New(rand.NewSource(seed)))
	replicas := make([]*nn.Model, workers)
	for i := range replicas {
		replicas[i] = spec.Build(rand.New(rand.NewSource(seed)))
	}
	opt := newAdam(master.Params(), 0.001)
	x, y := nn.NewTensor(bs, 28, 28, 1), make([]int32, bs)
	var dl *nn.Tensor
	step := 0
	for e := 0; e < epochs; e++ {
		perm := rng.Perm(train.n)
		start := time.Now()
		for b := 0; b+bs <= train.n; b += bs {
			w := replicas[step%workers]
			train.batch(x, y, perm[b:b+bs])
			w.ZeroGrads()
			_, d, err := nn.SoftmaxCrossEntropyInto(dl, w.Forward(x, true), y)
			if err != nil {
				t.Fatal(err)
			}
			dl = d
			w.Backward(dl)
			// Apply this worker's gradient to the master, then the worker pulls
			// fresh weights; the other replicas keep their older copies.
			mp, wp := master.Params(), w.Params()
			for i := range mp {
				copy(mp[i].Grad.Data, wp[i].Grad.Data)
			}
			opt.step(mp)
			if err := nn.CopyParams(w, master); err != nil {
				t.Fatal(err)
			}
			step++
		}
		t.Logf("%s: epoch %d took %v (%d steps, backend %s)", spec.Name, e+1, time.Since(start).Round(time.Millisecond), train.n/bs, nn.BLASBackend())
	}
	return master
}

func TestMLPAccuracy(t *testing.T) {
	if testing.Short() {
		t.Skip("trains on Fashion-MNIST; skipped in -short mode")
	}
	if raceEnabled {
		t.Skip("an epoch of instrumented pure-Go GEMM is too slow under -race; the nn tests cover the kernels")
	}
	train, test := loadFashion(t, "train"), loadFashion(t, "t10k")
	net := trainAdam(t, MLPSpec(), train, 1, 1, 1)
	acc := evaluate(net, test)
	t.Logf("fashion_mnist.mlp: test accuracy %.4f after 1 epoch", acc)
	if acc < 0.84 {
		t.Errorf("test accuracy %.4f < 0.84", acc)
	}
}

// TestCNNAccuracy measures the CNN after 2 epochs. It takes about a minute,
// so it only runs with ELASTICDL_LONG_TESTS=1.
func TestCNNAccuracy(t *testing.T) {
	if os.Getenv("ELASTICDL_LONG_TESTS") != "1" {
		t.Skip("set ELASTICDL_LONG_TESTS=1 to train the CNN for 2 epochs")
	}
	train, test := loadFashion(t, "train"), loadFashion(t, "t10k")
	for _, workers := range []int{1, 2} {
		net := trainAdam(t, CNNSpec(), train, 2, workers, 1)
		acc := evaluate(net, test)
		t.Logf("fashion_mnist.cnn: test accuracy %.4f after 2 epochs, %d simulated async worker(s)", acc, workers)
		if acc < 0.88 {
			t.Errorf("%d workers: test accuracy %.4f < 0.88", workers, acc)
		}
	}
}

// TestArchitectures pins the documented layer shapes.
func TestArchitectures(t *testing.T) {
	for _, c := range []struct {
		spec model.Spec
		want string
	}{
		{MLPSpec(), "dense_1/kernel[784 256] dense_1/bias[256] dense_2/kernel[256 10] dense_2/bias[10]"},
		{CNNSpec(), "conv2d_1/kernel[3 3 1 16] conv2d_1/bias[16] conv2d_2/kernel[3 3 16 32] conv2d_2/bias[32] " +
			"dense_1/kernel[1568 128] dense_1/bias[128] dense_2/kernel[128 10] dense_2/bias[10]"},
		{CNNWideSpec(), "conv2d_1/kernel[3 3 1 32] conv2d_1/bias[32] conv2d_2/kernel[3 3 32 64] conv2d_2/bias[64] " +
			"dense_1/kernel[3136 128] dense_1/bias[128] dense_2/kernel[128 10] dense_2/bias[10]"},
	} {
		got := ""
		for i, p := range c.spec.Build(rand.New(rand.NewSource(1))).Params() {
			if i > 0 {
				got += " "
			}
			got += fmt.Sprintf("%s%v", p.Name, p.Value.Shape)
		}
		if got != c.want {
			t.Errorf("%s params:\n got %s\nwant %s", c.spec.Name, got, c.want)
		}
	}
}
