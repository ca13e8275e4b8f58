package cli

import (
	"testing"
	"time"
)

func TestDecideAfterMaster(t *testing.T) {
	died := masterExit{code: -1, lived: 5 * time.Second}
	quickDeath := masterExit{code: 2, lived: 100 * time.Millisecond}
	cases := []struct {
		name      string
		e         masterExit
		restarts  int
		quick     int
		want      afterMaster
		wantQuick int
	}{
		{"succeeded", masterExit{code: exitOK}, 0, 0, afterMaster{verdict: jobEnded}, 0},
		{"the job failed", masterExit{code: exitError}, 3, 1, afterMaster{verdict: jobEnded}, 1},
		{"fenced: another master has the job", masterExit{code: exitFenced}, 0, 0, afterMaster{verdict: jobEnded}, 0},
		{"refused the job", masterExit{code: exitError, refused: true}, 0, 0, afterMaster{verdict: jobEnded}, 0},
		{"killed while the job is stopped", masterExit{code: -1, stopping: true}, 0, 0, afterMaster{verdict: jobEnded}, 0},
		{"killed while it worked: at once", died, 0, 0, afterMaster{verdict: restart}, 1},
		{"killed again after working: at once", died, 4, 3, afterMaster{verdict: restart}, 1},
		{"state lost (exit 3): at once", masterExit{code: exitRestart, lived: time.Minute}, 1, 1, afterMaster{verdict: restart}, 1},
		{"first quick death: at once", quickDeath, 0, 0, afterMaster{verdict: restart}, 1},
		{"third quick death in a row: 2 s", quickDeath, 2, 2, afterMaster{verdict: restart, wait: 2 * time.Second}, 3},
		{"too many restarts", died, maxMasterRestarts, 0, afterMaster{verdict: giveUp}, 0},
	}
	for _, c := range cases {
		got, quick := decideAfterMaster(c.e, c.restarts, c.quick)
		if got != c.want || quick != c.wantQuick {
			t.Errorf("%s: got %+v, quick %d; want %+v, quick %d", c.name, got, quick, c.want, c.wantQuick)
		}
	}
}
