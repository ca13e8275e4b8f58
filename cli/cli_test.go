package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"elasticdl/model"
	"elasticdl/model/zoo"
)

func run(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	reg := model.NewRegistry()
	if err := zoo.Register(reg); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	code = Run(context.Background(), Env{Stdout: &out, Stderr: &errOut, Registry: reg}, args)
	return code, out.String(), errOut.String()
}

func TestCommands(t *testing.T) {
	cases := []struct {
		args       []string
		code       int
		wantOut    string
		wantStderr string
	}{
		{[]string{"zoo"}, 0, "fashion_mnist.cnn", ""},
		{[]string{"zoo", "extra"}, 2, "", "unexpected argument"},
		{nil, 2, "", "usage: elasticdl"},
		{[]string{"help"}, 0, "", "commands:"},
		{[]string{"trian"}, 2, "", `unknown command "trian"`},
		{[]string{"train"}, 2, "", "--model_def: required"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--backend=yarn"}, 2, "", "--backend=yarn"},
		{[]string{"worker", "--master_addr=127.0.0.1:1"}, 2, "", "--worker_id: required"},
		{[]string{"worker", "--worker_id=1", "--master_addr=127.0.0.1:1", "--ps_addrs=127.0.0.1:2", "--model_def=nope"}, 2, "", "fashion_mnist.mlp"},
		{[]string{"ps", "--ps_id=2", "--num_ps_pods=2", "--addr=127.0.0.1:0"}, 2, "", "need 0 <= ps_id < num_ps_pods"},
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--optimizer=rmsprop"}, 2, "", "unknown optimizer"},
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--checkpoint_steps=5"}, 2, "", "--checkpoint_steps: needs --checkpoint_dir"},
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--keep_checkpoint_max=-1"}, 2, "", "--keep_checkpoint_max"},
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--checkpoint_dir_for_init=/nonexistent/ckpt"}, 1, "", "checkpoint_dir_for_init: checkpoint: read /nonexistent/ckpt"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--checkpoint_steps=-1", "--checkpoint_dir=c"}, 2, "", "--checkpoint_steps: must not be negative"},
		{[]string{"help"}, 0, "", "predict"},
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--use_async=false", "--grads_to_wait=0"}, 2, "", "--grads_to_wait=0"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--use_async=false", "--sync_version_tolerance=-1"}, 2, "", "--sync_version_tolerance=-1"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--use_async=false", "--lr_staleness_modulation"}, 2, "", "async SGD only"},
		{[]string{"evaluate", "--model_def=fashion_mnist.mlp", "--validation_data=x"}, 2, "", "--checkpoint_dir_for_init: required"},
		{[]string{"evaluate", "--model_def=fashion_mnist.mlp", "--checkpoint_dir_for_init=c"}, 2, "", "--validation_data: required"},
		{[]string{"evaluate", "--model_def=fashion_mnist.mlp", "--validation_data=x", "--checkpoint_dir_for_init=c", "--training_data=t"}, 2, "", "training_data"},
		{[]string{"predict", "--model_def=fashion_mnist.mlp", "--prediction_data=x", "--prediction_outputs=p.csv"}, 2, "", "--checkpoint_dir_for_init: required"},
		{[]string{"predict", "--model_def=fashion_mnist.mlp", "--prediction_data=x", "--checkpoint_dir_for_init=c"}, 2, "", "--prediction_outputs: required"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--evaluation_steps=10"}, 2, "", "--evaluation_steps: needs --validation_data"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			code, out, errOut := run(t, c.args...)
			if code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", code, c.code, out, errOut)
			}
			if !strings.Contains(out, c.wantOut) || !strings.Contains(errOut, c.wantStderr) {
				t.Fatalf("stdout %q / stderr %q; want %q / %q", out, errOut, c.wantOut, c.wantStderr)
			}
		})
	}
}
