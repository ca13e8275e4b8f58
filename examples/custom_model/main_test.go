package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const fashionMNIST = "/usr/share/datasets/fashion-mnist"

// The user's model registers beside the zoo, and its network fits its
// spec with and without parameters.
func TestRegistry(t *testing.T) {
	reg, err := registry()
	if err != nil {
		t.Fatal(err)
	}
	for _, params := range []string{"", "hidden=16"} {
		s, err := reg.Resolve(twoLayerName, params)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CheckBuild(); err != nil {
			t.Errorf("--model_params=%q: %v", params, err)
		}
	}
	if _, err := reg.Resolve(twoLayerName, "width=16"); err == nil || !strings.Contains(err.Error(), "unknown model parameter width (known: hidden)") {
		t.Errorf("a parameter the model does not know: %v", err)
	}
	if _, err := reg.Lookup("fashion_mnist.cnn"); err != nil {
		t.Errorf("the zoo is not there: %v", err)
	}
}

// TestTrainsWithItsOwnBinary builds the example as a user would and trains
// its model for one epoch on the local backend: the master, PS and workers
// are processes of the user's binary.
func TestTrainsWithItsOwnBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary and trains")
	}
	train := filepath.Join(fashionMNIST, "train-images-idx3-ubyte.gz")
	if _, err := os.Stat(train); err != nil {
		t.Skipf("Fashion-MNIST not installed: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "my-elasticdl")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	zoo, err := exec.Command(bin, "zoo").Output()
	if err != nil || !strings.Contains(string(zoo), twoLayerName) || !strings.Contains(string(zoo), "hidden=N") {
		t.Errorf("zoo does not list the user's model (%v):\n%s", err, zoo)
	}
	out := t.TempDir()
	job := exec.Command(bin, "train", "--model_def="+twoLayerName, "--model_params=hidden=32", "--training_data="+train,
		"--validation_data="+filepath.Join(fashionMNIST, "t10k-images-idx3-ubyte.gz"), "--num_workers=2", "--output="+out)
	if b, err := job.CombinedOutput(); err != nil {
		t.Fatalf("train: %v\n%s", err, b)
	}
	raw, err := os.ReadFile(filepath.Join(out, "job_summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var s struct {
		Status      string `json:"status"`
		ModelDef    string `json:"model_def"`
		ModelParams string `json:"model_params"`
		Eval        *struct {
			Accuracy float64 `json:"accuracy"`
		} `json:"eval"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	// One epoch of a 32-unit perceptron: about 0.8 on Fashion-MNIST.
	if s.Status != "succeeded" || s.ModelDef != twoLayerName || s.ModelParams != "hidden=32" || s.Eval == nil || s.Eval.Accuracy < 0.75 {
		t.Errorf("summary: %s", raw)
	}
}
