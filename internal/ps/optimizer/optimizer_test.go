package optimizer

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
)

// run applies each gradient in turn to a copy of p0 and returns the
// parameter after every step.
func run(t *testing.T, o Optimizer, p0 []float32, grads [][]float32, lrScale float32) [][]float32 {
	t.Helper()
	p := append([]float32(nil), p0...)
	var out [][]float32
	for _, g := range grads {
		if err := o.Apply("w", p, g, lrScale); err != nil {
			t.Fatal(err)
		}
		out = append(out, append([]float32(nil), p...))
	}
	return out
}

// near compares float32 results with float64 hand-computed values; 2e-6
// relative is a few float32 ulps after three steps.
func near(t *testing.T, step int, got []float32, want []float64) {
	t.Helper()
	for i := range want {
		if d := math.Abs(float64(got[i]) - want[i]); d > 2e-6*math.Max(1, math.Abs(want[i])) {
			t.Errorf("step %d, element %d: got %.9g, want %.9g", step+1, i, got[i], want[i])
		}
	}
}

func mustParse(t *testing.T, spec string) Optimizer {
	t.Helper()
	o, err := Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func TestSGD(t *testing.T) {
	// lr = 0.1, p -= 0.1*g:
	// step 1: [1 - 0.05, -2 - 0.1]   = [0.95, -2.1]
	// step 2: [0.95 + 0.1, -2.1 - 0.025] = [1.05, -2.125]
	got := run(t, mustParse(t, "sgd:learning_rate=0.1"), []float32{1, -2},
		[][]float32{{0.5, 1}, {-1, 0.25}}, 1)
	near(t, 0, got[0], []float64{0.95, -2.1})
	near(t, 1, got[1], []float64{1.05, -2.125})
}

func TestSGDLRScale(t *testing.T) {
	// lrScale 0.5 halves the step: 1 - 0.5*0.1*2 = 0.9.
	got := run(t, mustParse(t, "sgd:learning_rate=0.1"), []float32{1}, [][]float32{{2}}, 0.5)
	near(t, 0, got[0], []float64{0.9})
}

func TestMomentum(t *testing.T) {
	// lr 0.1, m 0.9, v = 0.9v - 0.1g, p += v.
	// element 0, g = 1:  v = -0.1, -0.19, -0.271 ; p = 0.9, 0.71, 0.439
	// element 1, g = -2: v =  0.2,  0.38,  0.542 ; p = 1.2, 1.58, 2.122
	o := mustParse(t, "momentum:learning_rate=0.1,momentum=0.9")
	got := run(t, o, []float32{1, 1}, [][]float32{{1, -2}, {1, -2}, {1, -2}}, 1)
	near(t, 0, got[0], []float64{0.9, 1.2})
	near(t, 1, got[1], []float64{0.71, 1.58})
	near(t, 2, got[2], []float64{0.439, 2.122})
	slots, step, ok := o.Slots("w")
	if !ok || step != 3 {
		t.Fatalf("Slots: step %d ok %v, want 3 true", step, ok)
	}
	v := slots["momentum"]
	if len(v) != 2 || math.Abs(float64(v[0])+0.271) > 1e-6 || math.Abs(float64(v[1])-0.542) > 1e-6 {
		t.Errorf("momentum slot %v, want [-0.271 0.542]", v)
	}
}

func TestNesterov(t *testing.T) {
	// v = 0.9v - 0.1g; p += 0.9v - 0.1g (v already updated).
	// element 0, g = 1:  v = -0.1, -0.19, -0.271
	//   p = 1 - 0.19 = 0.81; 0.81 - 0.271 = 0.539; 0.539 - 0.3439 = 0.1951
	// element 1, g = -2: v = 0.2, 0.38, 0.542
	//   p = 1 + 0.38 = 1.38; 1.38 + 0.542 = 1.922; 1.922 + 0.6878 = 2.6098
	got := run(t, mustParse(t, "momentum:learning_rate=0.1,momentum=0.9,nesterov=true"),
		[]float32{1, 1}, [][]float32{{1, -2}, {1, -2}, {1, -2}}, 1)
	near(t, 0, got[0], []float64{0.81, 1.38})
	near(t, 1, got[1], []float64{0.539, 1.922})
	near(t, 2, got[2], []float64{0.1951, 2.6098})
}

func TestAdam(t *testing.T) {
	// lr 0.1, b1 0.9, b2 0.999, eps 1e-7; lr_t = 0.1*sqrt(1-0.999^t)/(1-0.9^t)
	// = 0.0316227766, 0.0235316725, 0.0201010597 for t = 1, 2, 3.
	// element 0, g = 1, -0.5, 2:
	//   m = 0.1, 0.04, 0.236 ; v = 0.001, 0.001249, 0.005247751
	//   p = 1 - lr_t*m/(sqrt(v)+eps) = 0.900000316, 0.873366688, 0.807555618
	// element 1, g = 0.1 each step: m/sqrt(v) tracks the bias so each step
	//   moves ≈ lr: p = 0.900003162, 0.800005399, 0.700007225
	o := mustParse(t, "adam:learning_rate=0.1")
	got := run(t, o, []float32{1, 1}, [][]float32{{1, 0.1}, {-0.5, 0.1}, {2, 0.1}}, 1)
	near(t, 0, got[0], []float64{0.900000316226766, 0.9000031621776634})
	near(t, 1, got[1], []float64{0.8733666876221541, 0.8000053987548444})
	near(t, 2, got[2], []float64{0.807555618444076, 0.7000072253765882})
	slots, step, _ := o.Slots("w")
	if step != 3 || len(slots) != 2 {
		t.Fatalf("step %d slots %v", step, slots)
	}
	if m := slots["m"][0]; math.Abs(float64(m)-0.236) > 1e-6 {
		t.Errorf("m = %v, want 0.236", m)
	}
	if v := slots["v"][0]; math.Abs(float64(v)-0.005247751) > 1e-8 {
		t.Errorf("v = %v, want 0.005247751", v)
	}
}

func TestAMSGrad(t *testing.T) {
	// g = 1, 0.01, 0.01: v = 0.001, 0.0009991, 0.0009982009 shrinks, so
	// vhat stays at 0.001 and the steps differ from plain Adam:
	//   m = 0.1, 0.091, 0.0829
	//   amsgrad p = 0.900000316, 0.832284079, 0.779326599
	//   adam    p = 0.900000316, 0.832253587, 0.779248405
	grads := [][]float32{{1}, {0.01}, {0.01}}
	ams := run(t, mustParse(t, "adam:learning_rate=0.1,amsgrad=true"), []float32{1}, grads, 1)
	near(t, 0, ams[0], []float64{0.900000316226766})
	near(t, 1, ams[1], []float64{0.8322840794197135})
	near(t, 2, ams[2], []float64{0.7793265994958323})
	plain := run(t, mustParse(t, "adam:learning_rate=0.1,amsgrad=false"), []float32{1}, grads, 1)
	near(t, 1, plain[1], []float64{0.8322535866253747})
	near(t, 2, plain[2], []float64{0.7792484045758781})
}

func TestAdagrad(t *testing.T) {
	// lr 0.1, acc0 0.1: element 0, g = 1 thrice: acc = 1.1, 2.1, 3.1,
	//   p = 1 - 0.1/sqrt(1.1) = 0.904653750, - 0.1/sqrt(2.1) = 0.835647199,
	//       - 0.1/sqrt(3.1) = 0.778851019
	// element 1, g = 0.5, -3, 0: acc = 0.35, 9.35, 9.35,
	//   p = -2 - 0.05/sqrt(0.35) = -2.084515411, + 0.3/sqrt(9.35) = -1.986404923,
	//   then unchanged (g = 0).
	got := run(t, mustParse(t, "adagrad:learning_rate=0.1,initial_accumulator_value=0.1,epsilon=1e-7"),
		[]float32{1, -2}, [][]float32{{1, 0.5}, {1, -3}, {1, 0}}, 1)
	near(t, 0, got[0], []float64{0.904653750166349, -2.08451541118714})
	near(t, 1, got[1], []float64{0.835647198994018, -1.9864049233705368})
	near(t, 2, got[2], []float64{0.7788510187951178, -1.9864049233705368})
}

// TestConvergence minimizes f(x) = ½Σ a_i (x_i - c_i)², gradient a_i(x_i - c_i).
func TestConvergence(t *testing.T) {
	a := []float32{1, 4, 0.5}
	c := []float32{3, -1, 0.5}
	for _, spec := range []string{
		"sgd:learning_rate=0.1",
		"momentum:learning_rate=0.05,momentum=0.9",
		"momentum:learning_rate=0.05,momentum=0.9,nesterov=true",
		"adam:learning_rate=0.05",
		"adam:learning_rate=0.05,amsgrad=true",
		"adagrad:learning_rate=0.5",
	} {
		t.Run(spec, func(t *testing.T) {
			o := mustParse(t, spec)
			x := make([]float32, 3)
			g := make([]float32, 3)
			for range 3000 {
				for i := range x {
					g[i] = a[i] * (x[i] - c[i])
				}
				if err := o.Apply("x", x, g, 1); err != nil {
					t.Fatal(err)
				}
			}
			for i := range x {
				if math.Abs(float64(x[i]-c[i])) > 1e-2 {
					t.Errorf("x = %v, want ≈ %v", x, c)
					break
				}
			}
		})
	}
}

func TestApplyErrorsChangeNothing(t *testing.T) {
	o := mustParse(t, "adam")
	p := []float32{1, 2}
	if err := o.Apply("w", p, []float32{1}, 1); err == nil || !strings.Contains(err.Error(), `"w"`) {
		t.Errorf("length mismatch: error %v, want one naming the parameter", err)
	}
	for _, s := range []float32{0, -1, float32(math.NaN()), float32(math.Inf(1))} {
		if err := o.Apply("w", p, []float32{1, 1}, s); err == nil {
			t.Errorf("lrScale %v accepted", s)
		}
	}
	if p[0] != 1 || p[1] != 2 {
		t.Errorf("param changed on error: %v", p)
	}
	if _, _, ok := o.Slots("w"); ok {
		t.Error("slots created by a failed Apply")
	}
	// Slots sized for 2 elements refuse a 3-element parameter of the same name.
	if err := o.Apply("w", p, []float32{1, 1}, 1); err != nil {
		t.Fatal(err)
	}
	if err := o.Apply("w", []float32{1, 2, 3}, []float32{1, 1, 1}, 1); err == nil {
		t.Error("slot length mismatch accepted")
	}
}

func TestSetSlotsRoundTrip(t *testing.T) {
	a := mustParse(t, "adam:learning_rate=0.1")
	pa := []float32{1, 1}
	for range 2 {
		if err := a.Apply("w", pa, []float32{1, -1}, 1); err != nil {
			t.Fatal(err)
		}
	}
	slots, step, _ := a.Slots("w")
	b := mustParse(t, "adam:learning_rate=0.1")
	if err := b.SetSlots("w", slots, step); err != nil {
		t.Fatal(err)
	}
	pb := append([]float32(nil), pa...)
	_ = a.Apply("w", pa, []float32{0.3, 0.7}, 1)
	_ = b.Apply("w", pb, []float32{0.3, 0.7}, 1)
	if pa[0] != pb[0] || pa[1] != pb[1] {
		t.Errorf("restored optimizer diverges: %v vs %v", pa, pb)
	}
	// Slots returns copies.
	slots["m"][0] = 1234
	if s, _, _ := a.Slots("w"); s["m"][0] == 1234 {
		t.Error("Slots aliases internal state")
	}
	if err := b.SetSlots("w", map[string][]float32{"m": {1}}, 1); err == nil {
		t.Error("SetSlots with a missing slot accepted")
	}
	if err := b.SetSlots("w", map[string][]float32{"m": {1}, "v": {1, 2}}, 1); err == nil {
		t.Error("SetSlots with ragged slots accepted")
	}
}

func TestParse(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"sgd", "sgd:learning_rate=0.01,momentum=0,nesterov=false"},
		{" SGD : learning_rate = 0.1 ", "sgd:learning_rate=0.1,momentum=0,nesterov=false"},
		{"sgd:", "sgd:learning_rate=0.01,momentum=0,nesterov=false"},
		{"momentum:learning_rate=0.1,momentum=0.9,nesterov=true", "momentum:learning_rate=0.1,momentum=0.9,nesterov=true"},
		{"momentum", "momentum:learning_rate=0.01,momentum=0.9,nesterov=false"},
		{"adam", "adam:learning_rate=0.001,beta1=0.9,beta2=0.999,epsilon=1e-07,amsgrad=false"},
		{"adam:learning_rate=0.001,beta1=0.9,beta2=0.999,epsilon=1e-7,amsgrad=false", "adam:learning_rate=0.001,beta1=0.9,beta2=0.999,epsilon=1e-07,amsgrad=false"},
		{"adam:lr=0.01,beta_1=0.8,beta_2=0.99,amsgrad=true", "adam:learning_rate=0.01,beta1=0.8,beta2=0.99,epsilon=1e-07,amsgrad=true"},
		{"adagrad", "adagrad:learning_rate=0.001,initial_accumulator_value=0.1,epsilon=1e-07"},
		{"adagrad:learning_rate=0.01,initial_accumulator_value=0.1,epsilon=1e-7", "adagrad:learning_rate=0.01,initial_accumulator_value=0.1,epsilon=1e-07"},
	} {
		o, err := Parse(c.spec)
		if err != nil {
			t.Errorf("Parse(%q): %v", c.spec, err)
			continue
		}
		if o.String() != c.want {
			t.Errorf("Parse(%q) = %s, want %s", c.spec, o, c.want)
		}
		// String must itself parse back to the same optimizer.
		if o2, err := Parse(o.String()); err != nil || o2.String() != o.String() {
			t.Errorf("re-parse of %s: %v, %v", o, o2, err)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, c := range []struct{ spec, want string }{
		{"rmsprop", `unknown optimizer "rmsprop"`},
		{"", `unknown optimizer ""`},
		{"sgd:learning_rat=0.1", `unknown argument "learning_rat"`},
		{"adam:nesterov=true", `unknown argument "nesterov"`},
		{"sgd:learning_rate=fast", `learning_rate="fast" is not a finite number`},
		{"sgd:learning_rate=NaN", `learning_rate="NaN"`},
		{"sgd:learning_rate=inf", `learning_rate="inf"`},
		{"sgd:learning_rate=0", "learning_rate 0 must be"},
		{"adam:learning_rate=-0.1", "learning_rate -0.1 must be"},
		{"adam:amsgrad=maybe", `amsgrad="maybe" is not a boolean`},
		{"adam:beta1=1", "beta1 1 must be in [0, 1)"},
		{"adam:beta2=-0.5", "beta2 -0.5 must be in [0, 1)"},
		{"momentum:momentum=-1", "momentum -1 must be"},
		{"adagrad:initial_accumulator_value=-1", "initial_accumulator_value -1"},
		{"adagrad:epsilon=-1", "epsilon -1"},
		{"sgd:learning_rate", `argument "learning_rate" is not name=value`},
		{"sgd:learning_rate=0.1,,", `argument "" is not name=value`},
		{"sgd:learning_rate=0.1,lr=0.2", `"learning_rate" given twice`},
	} {
		_, err := Parse(c.spec)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) error %v, want containing %q", c.spec, err, c.want)
		}
	}
}

// TestConcurrentApply exercises the per-parameter locking under -race:
// updates to the same name serialize (the SGD sum is exact), different
// names run in parallel.
func TestConcurrentApply(t *testing.T) {
	o := mustParse(t, "sgd:learning_rate=1")
	const workers, steps = 8, 200
	params := map[string][]float32{"a": make([]float32, 4), "b": make([]float32, 4)}
	locks := map[string]*sync.Mutex{"a": {}, "b": {}}
	var wg sync.WaitGroup
	for w := range workers {
		name := []string{"a", "b"}[w%2]
		wg.Go(func() {
			g := []float32{1, 1, 1, 1}
			for range steps {
				// The optimizer serializes its own state; the parameter data
				// belongs to the caller, who locks it (the server does too).
				locks[name].Lock()
				err := o.Apply(name, params[name], g, 1)
				locks[name].Unlock()
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for name, p := range params {
		if want := float32(-workers / 2 * steps); p[0] != want {
			t.Errorf("%s = %v, want %v", name, p[0], want)
		}
		if _, step, _ := o.Slots(name); step != workers/2*steps {
			t.Errorf("%s step %d, want %d", name, step, workers/2*steps)
		}
	}
}

func BenchmarkApply(b *testing.B) {
	const n = 1 << 18
	for _, spec := range []string{"sgd:learning_rate=0.1", "momentum", "adam", "adagrad"} {
		b.Run(strings.SplitN(spec, ":", 2)[0], func(b *testing.B) {
			o, err := Parse(spec)
			if err != nil {
				b.Fatal(err)
			}
			p, g := make([]float32, n), make([]float32, n)
			for i := range g {
				g[i] = float32(i%7) * 0.01
			}
			b.SetBytes(4 * n)
			for b.Loop() {
				if err := o.Apply("w", p, g, 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func ExampleParse() {
	o, err := Parse("momentum:learning_rate=0.1,nesterov=true")
	if err != nil {
		panic(err)
	}
	fmt.Println(o)
	// Output: momentum:learning_rate=0.1,momentum=0.9,nesterov=true
}
