package k8s

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func TestNewNetworkPolicy(t *testing.T) {
	np := NewNetworkPolicy("j", "ns", "monitoring", 9100, 2)
	job := map[string]string{LabelApp: AppName, LabelJob: "j"}
	if np.Name != NetworkPolicyName("j") || np.Namespace != "ns" || np.Labels[LabelJob] != "j" {
		t.Errorf("meta %+v", np.ObjectMeta)
	}
	if got := np.Spec.PodSelector.MatchLabels; len(got) != 2 || got[LabelJob] != "j" || got[LabelApp] != AppName {
		t.Errorf("selects %v, want every pod of the job %v", got, job)
	}
	if len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Errorf("policy types %v, want Ingress only", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("%d ingress rules, want the job's pods and the metrics namespace", len(np.Spec.Ingress))
	}
	own := np.Spec.Ingress[0]
	if len(own.From) != 1 || own.From[0].PodSelector == nil || own.From[0].NamespaceSelector != nil || len(own.Ports) != 0 ||
		own.From[0].PodSelector.MatchLabels[LabelJob] != "j" {
		t.Errorf("rule of the job's pods %+v", own)
	}
	m := np.Spec.Ingress[1]
	if len(m.From) != 1 || m.From[0].PodSelector != nil || m.From[0].NamespaceSelector.MatchLabels[corev1.LabelMetadataName] != "monitoring" {
		t.Errorf("metrics peers %+v", m.From)
	}
	if len(m.Ports) != 1 || m.Ports[0].Port.IntVal != 9100 || *m.Ports[0].EndPort != 9103 || *m.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("metrics ports %+v, want 9100-9103/TCP (master, 2 PS)", m.Ports)
	}
	for _, np := range []*networkingv1.NetworkPolicy{NewNetworkPolicy("j", "ns", "", 9100, 2), NewNetworkPolicy("j", "ns", "monitoring", 0, 2)} {
		if len(np.Spec.Ingress) != 1 {
			t.Errorf("without a metrics namespace and port: %d rules, want 1", len(np.Spec.Ingress))
		}
	}
}
