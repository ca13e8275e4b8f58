package optimizer

import "testing"

func TestDecay(t *testing.T) {
	o, err := Parse("sgd:learning_rate=0.1,decay=1")
	if err != nil {
		t.Fatal(err)
	}
	p := []float32{1}
	// Updates use lr 0.1/(1+0), 0.1/(1+1), 0.1/(1+2).
	want := []float32{0.9, 0.85, 0.85 - 0.1/3}
	for i, w := range want {
		if err := o.Apply("w", p, []float32{1}, 1); err != nil {
			t.Fatal(err)
		}
		if d := p[0] - w; d > 1e-6 || d < -1e-6 {
			t.Fatalf("after update %d: %v, want %v", i+1, p[0], w)
		}
	}
	// Steps are per parameter.
	q := []float32{1}
	if err := o.Apply("other", q, []float32{1}, 1); err != nil || q[0] != 0.9 {
		t.Fatalf("first update of another parameter: %v, %v", q[0], err)
	}
	back, err := Parse(o.String())
	if err != nil || back.String() != o.String() {
		t.Fatalf("String %q does not round-trip: %v %v", o.String(), back, err)
	}
	if _, err := Parse("adam:decay=-1"); err == nil {
		t.Fatal("negative decay accepted")
	}
}
