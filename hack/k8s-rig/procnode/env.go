package main

import (
	"fmt"
	"math"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	corev1listers "k8s.io/client-go/listers/core/v1"
)

const localIP = "127.0.0.1"

// configError is a container configuration problem a kubelet reports as
// Waiting/CreateContainerConfigError and retries (e.g. a missing ConfigMap).
type configError struct{ error }

// expand replaces $(VAR) by mapping(VAR) as the kubelet does
// (k8s.io/kubernetes/third_party/forked/golang/expansion): "$$" is an escaped
// "$", and a reference to an undefined variable is left as written.
func expand(s string, mapping func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := mapping(name); ok && name != "" {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+2+end+1])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// envResolver holds what a container's environment is resolved from.
type envResolver struct {
	pod        *corev1.Pod
	podIP      string // "": the node's, 127.0.0.1
	nodeName   string
	allocCPU   resource.Quantity
	allocMem   resource.Quantity
	configMaps corev1listers.ConfigMapLister
	secrets    corev1listers.SecretLister
}

// containerEnv resolves envFrom and env of c in the kubelet's order (envFrom
// first, then env in order, each value $(VAR)-expanded against what is
// defined so far), and returns the variables in definition order.
//
// base holds variables the container gets besides its own (procnode's and
// the kubelet-like ones such as KUBERNETES_SERVICE_HOST): $(VAR) references
// may use them, as the kubelet lets them use the service variables.
func (r *envResolver) containerEnv(c *corev1.Container, base map[string]string) ([]string, map[string]string, error) {
	vals := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			order = append(order, k)
		}
		vals[k] = v
	}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			optional := ef.ConfigMapRef.Optional != nil && *ef.ConfigMapRef.Optional
			cm, err := r.configMaps.ConfigMaps(r.pod.Namespace).Get(ef.ConfigMapRef.Name)
			if err != nil {
				if optional {
					continue
				}
				return nil, nil, configError{fmt.Errorf("configmap %q not found", ef.ConfigMapRef.Name)}
			}
			keys := sortedKeys(cm.Data)
			for _, k := range keys {
				set(ef.Prefix+k, cm.Data[k])
			}
		case ef.SecretRef != nil:
			optional := ef.SecretRef.Optional != nil && *ef.SecretRef.Optional
			s, err := r.secrets.Secrets(r.pod.Namespace).Get(ef.SecretRef.Name)
			if err != nil {
				if optional {
					continue
				}
				return nil, nil, configError{fmt.Errorf("secret %q not found", ef.SecretRef.Name)}
			}
			keys := make([]string, 0, len(s.Data))
			for k := range s.Data {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				set(ef.Prefix+k, string(s.Data[k]))
			}
		}
	}
	mapping := func(k string) (string, bool) {
		if v, ok := vals[k]; ok {
			return v, true
		}
		v, ok := base[k]
		return v, ok
	}
	for i := range c.Env {
		e := &c.Env[i]
		if e.ValueFrom == nil {
			set(e.Name, expand(e.Value, mapping))
			continue
		}
		v, ok, err := r.valueFrom(c, e)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			set(e.Name, v)
		}
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vals[k])
	}
	return env, vals, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (r *envResolver) valueFrom(c *corev1.Container, e *corev1.EnvVar) (string, bool, error) {
	vf := e.ValueFrom
	switch {
	case vf.FieldRef != nil:
		v, err := r.fieldRef(vf.FieldRef.FieldPath)
		if err != nil {
			return "", false, configError{fmt.Errorf("env %s: %w", e.Name, err)}
		}
		return v, true, nil
	case vf.ResourceFieldRef != nil:
		v, err := r.resourceFieldRef(c, vf.ResourceFieldRef)
		if err != nil {
			return "", false, configError{fmt.Errorf("env %s: %w", e.Name, err)}
		}
		return v, true, nil
	case vf.ConfigMapKeyRef != nil:
		ref := vf.ConfigMapKeyRef
		optional := ref.Optional != nil && *ref.Optional
		cm, err := r.configMaps.ConfigMaps(r.pod.Namespace).Get(ref.Name)
		if err != nil {
			if optional {
				return "", false, nil
			}
			return "", false, configError{fmt.Errorf("configmap %q not found", ref.Name)}
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, configError{fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, r.pod.Namespace, ref.Name)}
		}
		return v, true, nil
	case vf.SecretKeyRef != nil:
		ref := vf.SecretKeyRef
		optional := ref.Optional != nil && *ref.Optional
		s, err := r.secrets.Secrets(r.pod.Namespace).Get(ref.Name)
		if err != nil {
			if optional {
				return "", false, nil
			}
			return "", false, configError{fmt.Errorf("secret %q not found", ref.Name)}
		}
		v, ok := s.Data[ref.Key]
		if !ok {
			if optional {
				return "", false, nil
			}
			return "", false, configError{fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, r.pod.Namespace, ref.Name)}
		}
		return string(v), true, nil
	}
	return "", false, nil
}

// fieldRef implements the downward API's env fields. The host IP is
// 127.0.0.1; the pod IP is the pod's own (see podIPs) or, when pods share
// the machine's address, 127.0.0.1 too.
func (r *envResolver) fieldRef(path string) (string, error) {
	p := r.pod
	if k, ok := subscript(path, "metadata.labels"); ok {
		return p.Labels[k], nil
	}
	if k, ok := subscript(path, "metadata.annotations"); ok {
		return p.Annotations[k], nil
	}
	switch path {
	case "metadata.name":
		return p.Name, nil
	case "metadata.namespace":
		return p.Namespace, nil
	case "metadata.uid":
		return string(p.UID), nil
	case "metadata.labels":
		return formatMap(p.Labels), nil
	case "metadata.annotations":
		return formatMap(p.Annotations), nil
	case "spec.nodeName":
		if p.Spec.NodeName != "" {
			return p.Spec.NodeName, nil
		}
		return r.nodeName, nil
	case "spec.serviceAccountName":
		return p.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		if r.podIP != "" {
			return r.podIP, nil
		}
		return localIP, nil
	case "status.hostIP", "status.hostIPs":
		return localIP, nil
	}
	return "", fmt.Errorf("unsupported fieldRef %q", path)
}

// subscript parses `prefix['key']`.
func subscript(path, prefix string) (string, bool) {
	if !strings.HasPrefix(path, prefix+"['") || !strings.HasSuffix(path, "']") {
		return "", false
	}
	return path[len(prefix)+2 : len(path)-2], true
}

// formatMap renders labels/annotations as the downward API does: k="v" lines, sorted.
func formatMap(m map[string]string) string {
	var b strings.Builder
	for i, k := range sortedKeys(m) {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintf(&b, "%s=%q", k, m[k])
	}
	return b.String()
}

// resourceFieldRef implements limits/requests of cpu, memory and
// ephemeral-storage; an unset limit is the node's allocatable, as on a kubelet.
func (r *envResolver) resourceFieldRef(c *corev1.Container, ref *corev1.ResourceFieldSelector) (string, error) {
	if ref.ContainerName != "" && ref.ContainerName != c.Name {
		found := false
		for _, cc := range append(append([]corev1.Container{}, r.pod.Spec.InitContainers...), r.pod.Spec.Containers...) {
			if cc.Name == ref.ContainerName {
				c = &cc
				found = true
				break
			}
		}
		if !found {
			return "", fmt.Errorf("container %q not found", ref.ContainerName)
		}
	}
	kind, res, ok := strings.Cut(ref.Resource, ".")
	if !ok || (kind != "limits" && kind != "requests") {
		return "", fmt.Errorf("unsupported resource %q", ref.Resource)
	}
	list := c.Resources.Limits
	if kind == "requests" {
		list = c.Resources.Requests
	}
	q, set := list[corev1.ResourceName(res)]
	if !set {
		switch {
		case kind == "limits" && res == "cpu":
			q = r.allocCPU
		case kind == "limits" && res == "memory":
			q = r.allocMem
		default:
			q = resource.Quantity{}
		}
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	if res == "cpu" {
		return fmt.Sprint(int64(math.Ceil(float64(q.MilliValue()) / float64(divisor.MilliValue())))), nil
	}
	return fmt.Sprint(int64(math.Ceil(float64(q.Value()) / float64(divisor.Value())))), nil
}
