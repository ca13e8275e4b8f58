package decimate

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cases := []struct {
		name   string
		ok     bool
		at     time.Duration // after t0
		stride time.Duration
		want   bool
	}{
		{"the first sample", false, 0, time.Second, true},
		{"a stride after", true, time.Second, time.Second, true},
		{"a quarter stride early", true, 750 * time.Millisecond, time.Second, true},
		{"earlier", true, 749 * time.Millisecond, time.Second, false},
		{"at most Jitter early on a long stride", true, 8*time.Second - Jitter, 8 * time.Second, true},
		{"more than Jitter early on a long stride", true, 8*time.Second - Jitter - 1, 8 * time.Second, false},
		{"the same time", true, 0, time.Second, false},
		{"before the last", true, -time.Second, time.Second, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Due(t0, c.ok, t0.Add(c.at), c.stride); got != c.want {
				t.Errorf("Due = %v, want %v", got, c.want)
			}
		})
	}
}

func TestHalve(t *testing.T) {
	// merge records what it was given: "prev<dropped<kept".
	merge := func(prev, dropped, kept string) string { return prev + "<" + dropped + "<" + kept }
	cases := []struct {
		in, want []string
	}{
		{nil, nil},
		{[]string{"a"}, []string{"a"}},
		{[]string{"a", "b"}, []string{"a"}},
		{[]string{"a", "b", "c"}, []string{"a", "a<b<c"}},
		{[]string{"a", "b", "c", "d", "e"}, []string{"a", "a<b<c", "c<d<e"}},
	}
	for _, c := range cases {
		t.Run(fmt.Sprint(c.in), func(t *testing.T) {
			in := slices.Clone(c.in)
			got := Halve(in, merge)
			if !slices.Equal(got, c.want) {
				t.Errorf("Halve = %q, want %q", got, c.want)
			}
			// What is dropped is cleared: the backing array holds no stale
			// samples (pointers in them would stay reachable).
			for i := len(got); i < len(in); i++ {
				if in[i] != "" {
					t.Errorf("in[%d] = %q after Halve, want cleared", i, in[i])
				}
			}
		})
	}
}
