package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ---- kubectl ------------------------------------------------------------------------------
//
// The tests talk to the API server through the rig's kubectl (v1.35.4) and
// decode its JSON into the few fields they look at (types below), so the test
// package depends on nothing the main module does not.

// kubectlCmd runs kubectl with the rig's admin kubeconfig and returns stdout;
// an error carries stderr.
func kubectlCmd(ctx context.Context, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(rigBin, "kubectl"), append([]string{"--kubeconfig", kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kubectlCmd(context.Background(), "", args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func kubectlApply(t *testing.T, manifest string, args ...string) string {
	t.Helper()
	out, err := kubectlCmd(context.Background(), manifest, append([]string{"apply", "-f", "-"}, args...)...)
	if err != nil {
		t.Fatalf("%v\nmanifest:\n%s", err, manifest)
	}
	return out
}

// getJSON runs `kubectl get ARGS -o json` into v; found is false on NotFound.
func getJSON(t *testing.T, v any, args ...string) (found bool) {
	t.Helper()
	out, err := kubectlCmd(context.Background(), "", append(append([]string{"get"}, args...), "-o", "json")...)
	if err != nil {
		if strings.Contains(err.Error(), "NotFound") || strings.Contains(err.Error(), "not found") {
			return false
		}
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(out), v); err != nil {
		t.Fatalf("decode kubectl get %v: %v", args, err)
	}
	return true
}

type ownerRef struct {
	Kind               string
	Name               string
	UID                string `json:"uid"`
	Controller         *bool
	BlockOwnerDeletion *bool
}

type objectMeta struct {
	Name              string
	Namespace         string
	UID               string `json:"uid"`
	Labels            map[string]string
	Annotations       map[string]string
	CreationTimestamp string
	DeletionTimestamp string
	OwnerReferences   []ownerRef
}

type envVar struct {
	Name      string
	Value     string
	ValueFrom *struct {
		FieldRef *struct{ FieldPath string }
	}
}

type container struct {
	Name      string
	Image     string
	Command   []string
	Args      []string
	Env       []envVar
	Resources struct{ Requests, Limits map[string]string }
}

type condition struct{ Type, Status, Reason, Message string }

type pod struct {
	Metadata objectMeta
	Spec     struct {
		NodeName           string
		PriorityClassName  string
		Priority           *int32
		NodeSelector       map[string]string
		ServiceAccountName string
		RestartPolicy      string
		Containers         []container
	}
	Status struct {
		Phase             string
		PodIP             string
		Reason, Message   string
		Conditions        []condition
		ContainerStatuses []struct {
			Name         string
			RestartCount int
			State        struct {
				Running    *struct{ StartedAt string }
				Terminated *struct {
					ExitCode        int
					Reason, Message string
				}
				Waiting *struct{ Reason, Message string }
			}
		}
	}
}

// running: phase Running and not being deleted.
func (p pod) running() bool { return p.Status.Phase == "Running" && p.Metadata.DeletionTimestamp == "" }

// unschedulable: Pending with PodScheduled=False.
func (p pod) unschedulable() bool {
	if p.Status.Phase != "Pending" || p.Spec.NodeName != "" {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == "PodScheduled" && c.Status == "False" {
			return true
		}
	}
	return false
}

func (p pod) String() string {
	s := fmt.Sprintf("%s(%s", p.Metadata.Name, p.Status.Phase)
	if p.Metadata.DeletionTimestamp != "" {
		s += ",deleting"
	}
	if p.unschedulable() {
		s += ",unschedulable"
	}
	if p.Spec.NodeName != "" {
		s += "@" + p.Spec.NodeName
	}
	return s + ")"
}

type podList struct{ Items []pod }

type service struct {
	Metadata objectMeta
	Spec     struct {
		Selector map[string]string
		Ports    []struct{ Port, TargetPort any }
	}
}

type event struct {
	Type, Reason, Message string
	InvolvedObject        struct{ Kind, Name string }
	Count                 int
}
