package roleflags

import (
	"slices"
	"strings"
	"testing"
)

func TestSplitCommand(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"python3 train.py", []string{"python3", "train.py"}},
		{"  python3   -u\ttrain.py  ", []string{"python3", "-u", "train.py"}},
		{`python3 train.py --name 'my model' --x="a b"`, []string{"python3", "train.py", "--name", "my model", "--x=a b"}},
		{`sh -c 'cd /app && exec python3 train.py'`, []string{"sh", "-c", "cd /app && exec python3 train.py"}},
		{`a "" b`, []string{"a", "", "b"}},
		{`a\ b "q\"uote" 'it''s'`, []string{"a b", `q"uote`, "its"}},
	} {
		got, err := SplitCommand(c.in)
		if err != nil || !slices.Equal(got, c.want) {
			t.Errorf("SplitCommand(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"", "empty"},
		{"   ", "empty"},
		{`python3 'train.py`, "unterminated ' quote"},
		{`python3 "train.py`, `unterminated " quote`},
		{`python3 \`, "lone backslash"},
	} {
		if _, err := SplitCommand(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SplitCommand(%q) error = %v, want one saying %q", c.in, err, c.want)
		}
	}
}

func TestCommandEnv(t *testing.T) {
	w := DefaultWorker()
	w.WorkerID, w.MasterAddr, w.PSAddrs, w.MinibatchSize, w.Seed, w.ModelParams = 7, "10.0.0.1:5000", []string{"a:1", "b:2"}, 32, 3, "hidden=64"
	w.DistributionStrategy, w.CollectiveAddr, w.GlobalBatchSize = StrategyAllReduce, "10.0.0.9:0", 96
	got := w.CommandEnv("job", "adam:learning_rate=0.001", false)
	for _, kv := range []string{
		"ELASTICDL_MASTER_ADDR=10.0.0.1:5000", "ELASTICDL_WORKER_ID=7", "ELASTICDL_PS_ADDRS=a:1,b:2",
		"ELASTICDL_MINIBATCH_SIZE=32", "ELASTICDL_SEED=3", "ELASTICDL_OPTIMIZER=adam:learning_rate=0.001",
		"ELASTICDL_MODEL_PARAMS=hidden=64", "ELASTICDL_JOB_NAME=job", "ELASTICDL_USE_ASYNC=false",
		"ELASTICDL_STRATEGY=AllreduceStrategy", "ELASTICDL_COLLECTIVE_ADDR=10.0.0.9:0", "ELASTICDL_GLOBAL_BATCH_SIZE=96",
	} {
		if !slices.Contains(got, kv) {
			t.Errorf("CommandEnv lacks %s: %q", kv, got)
		}
	}
}
