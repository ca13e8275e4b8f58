package k8s

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// NetworkPolicyName names a job's NetworkPolicy.
func NetworkPolicyName(job string) string { return "elasticdl-" + job }

// NewNetworkPolicy builds the policy that lets into job's pods (master, PS,
// workers) only the job's own pods, on any port: PS shards come and go and
// an AllReduce ring listens on any free port unless --collective_port fixes
// it; who may call what is then the job's TLS identities' business. With
// metricsNamespace and metricsPort set, pods of that namespace may also
// reach the metrics ports: the master's metricsPort and PS shard i's
// metricsPort+1+i, i < numPS. Egress is not restricted.
func NewNetworkPolicy(job, namespace, metricsNamespace string, metricsPort, numPS int) *networkingv1.NetworkPolicy {
	job1 := map[string]string{LabelApp: AppName, LabelJob: job}
	rules := []networkingv1.NetworkPolicyIngressRule{{
		From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: job1}}},
	}}
	if metricsNamespace != "" && metricsPort > 0 {
		tcp := corev1.ProtocolTCP
		port := intstr.FromInt32(int32(metricsPort))
		end := int32(metricsPort + 1 + max(numPS, 0))
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{
			From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: metricsNamespace},
			}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port, EndPort: &end}},
		})
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{Name: NetworkPolicyName(job), Namespace: namespace, Labels: JobLabels(job, ReplicaMaster)},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: job1},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     rules,
		},
	}
}

// CreateNetworkPolicy creates np, owned by job's master Job (created
// before it), so that it goes with the job.
func (c *Client) CreateNetworkPolicy(ctx context.Context, job string, np *networkingv1.NetworkPolicy) error {
	ctx, cancel := c.bounded(ctx)
	defer cancel()
	mj, err := c.cs.BatchV1().Jobs(np.Namespace).Get(ctx, MasterName(job), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("get Job %s to own NetworkPolicy %s: %w", MasterName(job), np.Name, err)
	}
	np = np.DeepCopy()
	np.OwnerReferences = []metav1.OwnerReference{{APIVersion: "batch/v1", Kind: "Job", Name: mj.Name, UID: mj.UID, BlockOwnerDeletion: ptrTo(true)}}
	if _, err := c.cs.NetworkingV1().NetworkPolicies(np.Namespace).Create(ctx, np, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create NetworkPolicy %s (--network_policy=false to do without): %w", np.Name, err)
	}
	return nil
}
