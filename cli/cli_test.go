package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	flag "github.com/spf13/pflag"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
	"elasticdl/internal/roleflags"
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
		{[]string{"zoo"}, 0, "ctr.xdeepfm: dense=N (dense features, default 13); fields=N", ""},
		{[]string{"worker", "--worker_id=1", "--master_addr=127.0.0.1:1", "--ps_addrs=127.0.0.1:2", "--model_def=ctr.deepfm", "--model_params=fields=x"}, 2, "", `fields="x": want an integer in [1, 4096]`},
		{k8sTrain("--yaml", "--model_params=fields=62"), 0, "- --model_params=fields=62", ""},
		{[]string{"zoo", "extra"}, 2, "", "unexpected argument"},
		{[]string{"version"}, 0, "BLAS backend: ", ""},
		{[]string{"version", "--short"}, 2, "", "unknown flag: --short; see 'elasticdl version --help'"},
		{nil, 2, "", "usage: elasticdl"},
		{[]string{"help"}, 0, "commands:", ""},
		{[]string{"--help"}, 0, "completion", ""},
		{[]string{"train", "--help"}, 0, "Job size:\n      --num_workers int", ""},
		{[]string{"train", "--num_epoch=2"}, 2, "", "unknown flag: --num_epoch (did you mean --num_epochs?); see 'elasticdl train --help'"},
		{[]string{"train", "--num_workers=abc"}, 2, "", `invalid argument "abc" for "--num_workers" flag`},
		{[]string{"help", "zoo"}, 0, "Usage:\n  elasticdl zoo [flags]", ""},
		{[]string{"trian"}, 2, "", `unknown command "trian" for "elasticdl" (did you mean train?); see 'elasticdl --help'`},
		{[]string{"train"}, 2, "", "--model_def: required"},
		{[]string{"train"}, 2, "", "or --worker_command for a worker program of your own"},
		// A worker program of the user's own (--worker_command).
		{[]string{"train", "--worker_command=python3 'x", "--optimizer=sgd", "--training_data=x", "--output=o"}, 2, "", "--worker_command: unterminated ' quote"},
		{[]string{"train", "--worker_command=python3 x.py", "--model_def=fashion_mnist.mlp", "--optimizer=sgd", "--training_data=x", "--output=o"}, 2, "", "--model_def: must be empty with --worker_command"},
		{[]string{"train", "--worker_command=python3 x.py", "--training_data=x", "--output=o"}, 2, "", "--optimizer: required with --worker_command"},
		{[]string{"train", "--worker_command=python3 x.py", "--optimizer=sgd", "--training_data=x", "--output=o", "--distribution_strategy=AllreduceStrategy", "--num_ps_pods=0", "--checkpoint_dir=c", "--checkpoint_steps=10"}, 2, "", "--checkpoint_steps: --checkpoint_steps and --checkpoint_dir_for_init are not supported yet for worker programs with AllreduceStrategy"},
		{[]string{"train", "--worker_command=nosuchprogram x.py", "--optimizer=sgd", "--training_data=x", "--output=o"}, 2, "", `--worker_command: exec: "nosuchprogram": executable file not found`},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--num_classes=3", "--training_data=x", "--output=o"}, 2, "", "--num_classes: is for --worker_command jobs"},
		{[]string{"predict", "--worker_command=python3 x.py", "--prediction_data=x", "--prediction_outputs=p.csv", "--checkpoint_dir_for_init=c"}, 2, "", "--num_classes: required for a predict job with --worker_command"},
		{k8sTrain("--yaml", "--model_def=", "--worker_command=python3 /app/train.py", "--optimizer=sgd"), 0, "- --worker_command=python3 /app/train.py", ""},
		// elasticdl data export.
		{[]string{"data"}, 2, "", "want `elasticdl data export"},
		{[]string{"data", "export", "--output=o.csv"}, 2, "", "--data: required"},
		{[]string{"data", "export", "--data=synthetic-ctr://?records=10", "--output=o.txt"}, 2, "", "name it *.csv"},
		{[]string{"data", "export", "--data=synthetic-ctr://?records=10", "--output=o.csv", "--end=11"}, 2, "", "want 0 <= start <= end <= 10"},
		{[]string{"data", "export", "--data=/nonexistent/x.csv", "--output=o.csv"}, 1, "", "--data: "},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--backend=yarn"}, 2, "", "--backend=yarn"},
		{[]string{"worker", "--master_addr=127.0.0.1:1"}, 2, "", "--worker_id: required"},
		{[]string{"worker", "--worker_id=1", "--master_addr=127.0.0.1:1", "--ps_addrs=127.0.0.1:2", "--model_def=nope"}, 2, "", "fashion_mnist.mlp"},
		{[]string{"ps", "--ps_id=2", "--num_ps_pods=2", "--addr=127.0.0.1:0"}, 2, "", "need 0 <= ps_id < num_ps_pods"},
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--optimizer=rmsprop"}, 2, "", "unknown optimizer"},
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--checkpoint_steps=5"}, 2, "", "--checkpoint_steps: needs --checkpoint_dir"},
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--keep_checkpoint_max=-1"}, 2, "", "--keep_checkpoint_max"},
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--checkpoint_dir_for_init=/nonexistent/ckpt"}, 1, "", "checkpoint_dir_for_init: checkpoint: read /nonexistent/ckpt"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--checkpoint_steps=-1", "--checkpoint_dir=c"}, 2, "", "--checkpoint_steps: must not be negative"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--worker_master_timeout=0s"}, 2, "", "--worker_master_timeout: must be positive, got 0s"},
		{[]string{"help"}, 0, "predict", ""},
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--use_async=false", "--grads_to_wait=0"}, 2, "", "--grads_to_wait=0"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--use_async=false", "--sync_version_tolerance=-1"}, 2, "", "--sync_version_tolerance=-1"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--use_async=false", "--lr_staleness_modulation"}, 2, "", "async SGD only"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--transport_dtype=float16"}, 2, "", `--transport_dtype: "float16" is not float32 or bfloat16`},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--ps_transport=http"}, 2, "", `--ps_transport: "http" is not direct or grpc`},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--distribution_strategy=AllreduceStrategy", "--ps_transport=grpc"}, 2, "", "--ps_transport: is a parameter-server setting"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--distribution_strategy=AllreduceStrategy", "--transport_dtype=bfloat16"}, 2, "", "parameter-server settings; the ring moves float32"},
		{[]string{"train", "--worker_command=python3 train.py", "--optimizer=sgd", "--training_data=x", "--output=o", "--transport_dtype=bfloat16"}, 2, "", "--transport_dtype: the Python SDK sends and takes float32"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--distribution_strategy=Mirrored"}, 2, "", `--distribution_strategy: "Mirrored" is not`},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--distribution_strategy=AllreduceStrategy", "--num_ps_pods=1"}, 2, "", "--num_ps_pods: must be 0 with --distribution_strategy=AllreduceStrategy"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=/nonexistent/x", "--output=o", "--distribution_strategy=AllreduceStrategy"}, 1, "", "--training_data: stat /nonexistent/x"},
		{k8sTrain("--yaml", "--distribution_strategy=AllreduceStrategy", "--collective_port=29500"), 0, "- --collective_port=29500", ""},
		{k8sTrain("--yaml", "--distribution_strategy=AllreduceStrategy", "--num_ps_pods=1"), 2, "", "--num_ps_pods: must be 0 with --distribution_strategy=AllreduceStrategy"},
		{k8sTrain("--collective_port=70000"), 2, "", "--collective_port: 70000 is not a port"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--gang"}, 2, "", "--gang: all-or-nothing admission is for --backend=k8s"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--dashboard_port=-2"}, 2, "", "--dashboard_port=-2: want -1 (no dashboard), 0"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--dashboard_port=70000"}, 2, "", "--dashboard_port=70000: want -1"},
		{k8sTrain("--dashboard_port=70000"), 2, "", "--dashboard_port=70000: want -1"},
		{k8sTrain("--yaml", "--dashboard_port=9000"), 0, "containerPort: 9000", ""},
		{k8sTrain("--yaml", "--gang"), 0, "- --gang", ""},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--replace_slow_workers", "--replace_slow_after=0s"}, 2, "", "--replace_slow_after: must be positive, got 0s"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--replace_slow_workers", "--slow_worker_fraction=0"}, 2, "", "--replace_slow_workers: needs slow workers marked: --slow_worker_fraction is 0"},
		{k8sTrain("--yaml", "--replace_slow_workers", "--replace_slow_after=2m"), 0, "- --replace_slow_after=2m0s", ""},
		{[]string{"evaluate", "--model_def=fashion_mnist.mlp", "--validation_data=x"}, 2, "", "--checkpoint_dir_for_init: required"},
		{[]string{"evaluate", "--model_def=fashion_mnist.mlp", "--checkpoint_dir_for_init=c"}, 2, "", "--validation_data: required"},
		{[]string{"evaluate", "--model_def=fashion_mnist.mlp", "--validation_data=x", "--checkpoint_dir_for_init=c", "--training_data=t"}, 2, "", "training_data"},
		{[]string{"predict", "--model_def=fashion_mnist.mlp", "--prediction_data=x", "--prediction_outputs=p.csv"}, 2, "", "--checkpoint_dir_for_init: required"},
		{[]string{"predict", "--model_def=fashion_mnist.mlp", "--prediction_data=x", "--checkpoint_dir_for_init=c"}, 2, "", "--prediction_outputs: required"},
		{[]string{"train", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o", "--evaluation_steps=10"}, 2, "", "--evaluation_steps: needs --validation_data"},
		// A PS whose master is unreachable exits instead of living on.
		{[]string{"ps", "--ps_id=0", "--num_ps_pods=1", "--addr=127.0.0.1:0", "--master_addr=127.0.0.1:1", "--master_timeout=300ms"}, 1, "", "master is gone: 127.0.0.1:1 unreachable"},
		// --backend=k8s: flags checked before anything contacts a cluster.
		{k8sTrain("--image="), 2, "", "--image: required"},
		{k8sTrain("--worker_pod_priority=1.5"), 2, "", "in [0,1]"},
		{k8sTrain("--worker_resource_request=cpu=lots"), 2, "", "--worker_resource_request"},
		{k8sTrain("--node_selector=novalue"), 2, "", "--node_selector"},
		{k8sTrain("--image_pull_policy=Sometimes"), 2, "", "--image_pull_policy"},
		{k8sTrain("--ps_port=70000"), 2, "", "--ps_port: 70000 is not a port"},
		{k8sTrain("--job_name=Bad_Name", "--yaml"), 2, "", "--job_name: job name"},
		{k8sTrain("--yaml"), 0, "serviceAccountName: elasticdl", ""},
		{k8sTrain("--yaml", "--volume=claim_name=data,mount_path=/data"), 0, "claimName: data", ""},
		{k8sTrain("--volume=claim_name=data"), 2, "", "--volume: volume"},
		{k8sTrain("--kubeconfig=/nonexistent/kubeconfig"), 1, "", "/nonexistent/kubeconfig"},
		{[]string{"status"}, 2, "", "usage: elasticdl status JOB"},
		// Job commands check their flags before they contact the cluster.
		{[]string{"scale", "j", "--kubeconfig=/nonexistent/kubeconfig"}, 2, "", "--workers or --ps: required"},
		{[]string{"scale", "j", "--workers=-1", "--kubeconfig=/nonexistent/kubeconfig"}, 2, "", "--workers or --ps: required"},
		{[]string{"scale", "j", "--ps=0", "--kubeconfig=/nonexistent/kubeconfig"}, 2, "", "--ps=0: want 1..64"},
		{[]string{"scale", "j", "--ps=65", "--kubeconfig=/nonexistent/kubeconfig"}, 2, "", "--ps=65: want 1..64"},
		{[]string{"scale", "j", "--ps=2", "--kubeconfig=/nonexistent/kubeconfig"}, 1, "", "/nonexistent/kubeconfig"},
		{[]string{"logs", "j", "--role=chief", "--kubeconfig=/nonexistent/kubeconfig"}, 2, "", "--role=chief: want master, worker or ps"},
		{[]string{"scale", "j", "--workers=2", "--kubeconfig=/nonexistent/kubeconfig"}, 1, "", "/nonexistent/kubeconfig"},
		{[]string{"autoscaler", "--interval=0"}, 2, "", "--interval and --api_timeout must be positive"},
		{[]string{"autoscaler", "--metrics_port=70000"}, 2, "", "--metrics_port must be a port number"},
		{[]string{"autoscaler", "--policy=srpt"}, 2, "", `--policy: policy "srpt": want fair or remaining`},
		{[]string{"autoscaler", "--fairness=0.2"}, 2, "", "--fairness and --resize_cost are the remaining policy's: give --policy=remaining too"},
		{[]string{"autoscaler", "--policy=remaining", "--fairness=1.5"}, 2, "", "--fairness=1.5: want a fraction in [0, 1]"},
		{[]string{"autoscaler", "--policy=remaining", "--resize_cost=-1s"}, 2, "", "--resize_cost=-1s: must not be negative"},
		{[]string{"autoscaler", "--policy=remaining", "--fairness=0.2", "--resize_cost=30s", "--kubeconfig=/nonexistent/kubeconfig"}, 1, "", "/nonexistent/kubeconfig"},
		// A local job is named by its --output.
		{[]string{"scale", "--output=/nonexistent/job", "--workers=2"}, 1, "", "no local job under /nonexistent/job"},
		{[]string{"scale", "--output=/nonexistent/job"}, 2, "", "--workers or --ps: required"},
		{[]string{"scale", "--output=/nonexistent/job", "--ps=0"}, 2, "", "--ps=0: want 1..64"},
		{[]string{"scale", "--output=/nonexistent/job", "--ps=2"}, 1, "", "no local job under /nonexistent/job"},
		{[]string{"scale", "j", "--output=/nonexistent/job", "--workers=2"}, 2, "", `unexpected argument "j"`},
		{[]string{"master", "--job_type=fly"}, 2, "", "--job_type=fly"},
		{[]string{"master", "--image=i", "--model_def=fashion_mnist.mlp", "--training_data=x", "--output=o"}, 2, "", "POD_NAME, POD_NAMESPACE and POD_IP must be set"},
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

// k8sTrain is a valid `train --backend=k8s` command line plus extra flags.
func k8sTrain(extra ...string) []string {
	return append([]string{"train", "--backend=k8s", "--image=elasticdl:test", "--job_name=t1", "--model_def=fashion_mnist.mlp",
		"--training_data=/data/train", "--output=/out"}, extra...)
}

// On Kubernetes an AllReduce worker listens at its own pod IP, which the
// kubelet puts in place of $(POD_IP): any port by default, or
// --collective_port.
func TestK8sAddrs(t *testing.T) {
	cfg := master.DefaultConfig()
	o := k8sOptions{masterPort: 50001}
	k8sAddrs(&cfg, o, "10.244.0.5")
	if cfg.ListenAddr != ":50001" || cfg.AdvertiseAddr != "10.244.0.5:50001" || cfg.CollectiveAddr != "$(POD_IP):0" {
		t.Errorf("listen %q advertise %q collective %q", cfg.ListenAddr, cfg.AdvertiseAddr, cfg.CollectiveAddr)
	}
	o.collectivePort = 29500
	k8sAddrs(&cfg, o, "10.244.0.5")
	if cfg.CollectiveAddr != k8s.PodIPRef+":29500" {
		t.Errorf("collective %q with --collective_port=29500", cfg.CollectiveAddr)
	}
	// What the kubelet makes of it is a valid worker flag.
	if err := roleflags.CheckCollectiveAddr(strings.ReplaceAll(cfg.CollectiveAddr, k8s.PodIPRef, "10.244.0.9")); err != nil {
		t.Error(err)
	}
}

func TestYAMLForwardsTheJobFlags(t *testing.T) {
	code, out, errOut := run(t, k8sTrain("--yaml", "--num_workers=4", "--kubeconfig=/x", "--namespace=team", "--worker_pod_priority=0.5")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"kind: Job", "apiVersion: batch/v1", "name: elasticdl-t1-master", "namespace: team", "- master", "- --job_type=train", "- --num_workers=4",
		"- --worker_pod_priority=0.5", "elasticdl.io/replica-type: master", "fieldPath: status.podIP", "restartPolicy: Never",
		"podReplacementPolicy: Failed", "podFailurePolicy:",
		"elasticdl.io/dashboard-port: \"8042\"", "containerPort: 8042", "name: dashboard",
		"elasticdl.io/max-workers: \"4\"", "elasticdl.io/min-workers: \"0\"", "elasticdl.io/worker-request: cpu=1,memory=1Gi"} {
		if !strings.Contains(out, want) {
			t.Errorf("manifest lacks %q:\n%s", want, out)
		}
	}
	// Read by the client only: the master pod must not get them.
	for _, not := range []string{"--yaml", "--kubeconfig", "--backend"} {
		if strings.Contains(out, not) {
			t.Errorf("manifest passes %s on:\n%s", not, out)
		}
	}
}

// --dashboard_port=-1: the master pod declares no dashboard.
func TestYAMLWithoutDashboard(t *testing.T) {
	code, out, errOut := run(t, k8sTrain("--yaml", "--dashboard_port=-1")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "dashboard-port") || strings.Contains(out, "containerPort") {
		t.Errorf("the manifest declares a dashboard:\n%s", out)
	}
}

// The exit codes a master pod's Job reads (k8s.NewMasterJob's pod failure
// policy) are the ones the command exits with.
func TestMasterExitCodes(t *testing.T) {
	if exitError != k8s.ExitJobFailed || exitUsage != k8s.ExitUsage || exitRestart != k8s.ExitHandedOver {
		t.Errorf("exit codes: job failed %d, usage %d, restart %d; the master's Job expects %d, %d, %d",
			exitError, exitUsage, exitRestart, k8s.ExitJobFailed, k8s.ExitUsage, k8s.ExitHandedOver)
	}
}

func TestJobTypeArg(t *testing.T) {
	mode, rest := jobTypeArg([]string{"--a=1", "--job_type", "predict", "--b=2"})
	if mode != "predict" || strings.Join(rest, " ") != "--a=1 --b=2" {
		t.Errorf("got %q %q", mode, rest)
	}
	if mode, _ := jobTypeArg(nil); mode != "train" {
		t.Errorf("default %q", mode)
	}
}

// TestDataExport writes generated records as CSV and prints the URI that
// reads them back (data.ExportCSV's test checks the records themselves).
func TestDataExport(t *testing.T) {
	out := filepath.Join(t.TempDir(), "ctr.csv")
	code, stdout, stderr := run(t, "data", "export", "--data=synthetic-ctr://?records=50&dense=2&categorical=2&pairs=1", "--output="+out, "--start=10")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	want := "wrote 40 records of synthetic-ctr://?records=50&dense=2&categorical=2&pairs=1 to " + out + " (0 corrupt left out); read them as\n  csv://" + out + "?schema=label:label,f{1..2}:num,c{1..2}:id\n"
	if stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}
	b, err := os.ReadFile(out)
	if err != nil || strings.Count(string(b), "\n") != 40 {
		t.Errorf("%s: %d lines, %v; want 40", out, strings.Count(string(b), "\n"), err)
	}
	if left, _ := filepath.Glob(out + ".*.tmp"); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestFlagsOf: every command parses its flags before it does anything
// else, so that help, completion and docs/cli.md can read them.
func TestFlagsOf(t *testing.T) {
	env := Env{Registry: model.NewRegistry()}
	for _, c := range commands() {
		fs := flagsOf(c, env)
		if fs == nil {
			t.Errorf("%s: no flag set", c.name)
			continue
		}
		fs.VisitAll(func(f *flag.Flag) {
			if f.Usage == "" {
				t.Errorf("%s --%s: no help text", c.name, f.Name)
			}
		})
	}
}

// TestCLIReference keeps docs/cli.md what the code generates (make docs,
// or ELASTICDL_UPDATE_DOCS=1 go test ./cli -run TestCLIReference).
func TestCLIReference(t *testing.T) {
	got := Reference(Env{Registry: model.NewRegistry()})
	const path = "../docs/cli.md"
	if os.Getenv("ELASTICDL_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(want) != got {
		t.Errorf("%s is out of date: run make docs", path)
	}
	for _, s := range []string{"## elasticdl train", "| `--num_workers` | `2` |", "**Kubernetes**", "## elasticdl data"} {
		if !strings.Contains(got, s) {
			t.Errorf("reference lacks %q", s)
		}
	}
	if strings.Contains(got, "## elasticdl worker") {
		t.Error("reference lists the worker role, which people do not run")
	}
}
