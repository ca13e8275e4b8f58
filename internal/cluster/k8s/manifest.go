package k8s

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"

	"elasticdl/internal/cluster"
)

// Labels every object of a job carries. LabelStatus is set on the master pod
// when the job ends.
const (
	LabelApp          = "app.kubernetes.io/name"
	AppName           = "elasticdl"
	LabelJob          = "elasticdl.io/job-name"
	LabelReplicaType  = "elasticdl.io/replica-type"
	LabelReplicaIndex = "elasticdl.io/replica-index"
	LabelInstanceID   = "elasticdl.io/instance-id"
	LabelStatus       = "status"

	// ReplicaMaster is the replica type of the master pod; workers and PS
	// use cluster.Worker and cluster.PS.
	ReplicaMaster = "master"

	// StatusFinished and StatusFailed are the values of LabelStatus.
	StatusFinished = "Finished"
	StatusFailed   = "Failed"

	// SummaryKey is the key of the job summary in the summary ConfigMap.
	SummaryKey = "job_summary.json"

	// ContainerName is the name of the one container of every pod.
	ContainerName = "elasticdl"
	// Command is the container command: the elasticdl binary, on PATH in
	// the image (deploy/Dockerfile).
	Command = "elasticdl"
)

// MasterName, InstancePodName, PSServiceName and SummaryConfigMapName
// name a job's objects; every name starts with "elasticdl-<job>-".
//
// MasterName names the batch/v1 Job that runs the master (its pods are
// named by the Job controller: MasterName-xxxxx) and the master's Service.
func MasterName(job string) string { return "elasticdl-" + job + "-master" }

// InstancePodName names the pod of one launch of a worker or PS.
func InstancePodName(job string, role cluster.Role, id int) string {
	return fmt.Sprintf("elasticdl-%s-%s-%d", job, role, id)
}

// PSServiceName names the Service of PS shard index.
func PSServiceName(job string, index int) string {
	return fmt.Sprintf("elasticdl-%s-ps-%d", job, index)
}

// SummaryConfigMapName names the ConfigMap the master writes the job
// summary to.
func SummaryConfigMapName(job string) string { return "elasticdl-" + job + "-summary" }

// JobSelector selects every object of a job.
func JobSelector(job string) string {
	return LabelApp + "=" + AppName + "," + LabelJob + "=" + job
}

// CheckJobName rejects a job name that cannot be part of the names and
// labels of the job's objects.
func CheckJobName(job string) error {
	if errs := validation.IsDNS1123Label(job); len(errs) > 0 {
		return fmt.Errorf("job name %q: must be lower-case letters, digits and '-', starting and ending with a letter or digit (%s)", job, strings.Join(errs, "; "))
	}
	// The longest name is a Service, which must be a DNS-1035 label.
	probe := PSServiceName(job, 999)
	if errs := validation.IsDNS1035Label(probe); len(errs) > 0 {
		return fmt.Errorf("job name %q: must be lower-case letters, digits and '-', start with a letter, and be at most %d characters (%s)",
			job, validation.DNS1035LabelMaxLength-len(probe)+len(job), strings.Join(errs, "; "))
	}
	return nil
}

// JobLabels are the labels of every object of a job with this replica type.
func JobLabels(job, replicaType string) map[string]string {
	return map[string]string{LabelApp: AppName, LabelJob: job, LabelReplicaType: replicaType}
}

// PodSettings is how a job's pods are built beyond their command.
type PodSettings struct {
	Image           string
	ImagePullPolicy corev1.PullPolicy
	ServiceAccount  string
	PriorityClass   string
	Resources       corev1.ResourceRequirements
	NodeSelector    map[string]string
	// Env is added to the container's environment after the variables
	// the pod gets from the downward API.
	Env []corev1.EnvVar
	// EnvFrom are Secrets or ConfigMaps whose every key becomes a
	// variable (--s3_secret: the AWS_* credentials of object storage).
	EnvFrom []corev1.EnvFromSource
	// TerminationGracePeriod in seconds; 0 keeps Kubernetes' default.
	TerminationGracePeriod int64
	// Volumes are mounted into the container (data, --output,
	// checkpoints).
	Volumes []Volume
	// Annotations of the pod.
	Annotations map[string]string
}

// ScrapeAnnotations are the prometheus.io/* annotations by which the
// common Prometheus configurations find a pod's /metrics.
func ScrapeAnnotations(port int) map[string]string {
	return map[string]string{"prometheus.io/scrape": "true", "prometheus.io/port": strconv.Itoa(port), "prometheus.io/path": "/metrics"}
}

// Volume is a PersistentVolumeClaim or a host path mounted at MountPath
// (ElasticDL's --volume).
type Volume struct {
	ClaimName, HostPath, MountPath string
	ReadOnly                       bool
}

// ParseVolumes parses "claim_name=C,mount_path=/p[,read_only=true];host_path=/h,mount_path=/q".
func ParseVolumes(spec string) ([]Volume, error) {
	var out []Volume
	for _, one := range strings.Split(spec, ";") {
		if strings.TrimSpace(one) == "" {
			continue
		}
		kv, _, err := ParseKeyValues(one)
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", one, err)
		}
		v := Volume{ClaimName: kv["claim_name"], HostPath: kv["host_path"], MountPath: kv["mount_path"]}
		for k, val := range kv {
			switch k {
			case "claim_name", "host_path", "mount_path":
			case "read_only":
				b, err := strconv.ParseBool(val)
				if err != nil {
					return nil, fmt.Errorf("volume %q: read_only=%s: %w", one, val, err)
				}
				v.ReadOnly = b
			default:
				return nil, fmt.Errorf("volume %q: unknown key %q (claim_name, host_path, mount_path, read_only)", one, k)
			}
		}
		switch {
		case (v.ClaimName == "") == (v.HostPath == ""):
			return nil, fmt.Errorf("volume %q: give exactly one of claim_name and host_path", one)
		case !strings.HasPrefix(v.MountPath, "/"):
			return nil, fmt.Errorf("volume %q: mount_path must be an absolute path", one)
		}
		out = append(out, v)
	}
	return out, nil
}

// restrictedSecurity meets the Pod Security Standard "restricted", so the
// job runs in namespaces that enforce it; the image must run as a non-root
// user (deploy/Dockerfile does).
func restrictedSecurity() (*corev1.PodSecurityContext, *corev1.SecurityContext) {
	yes, no := true, false
	return &corev1.PodSecurityContext{
			RunAsNonRoot:   &yes,
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		}, &corev1.SecurityContext{
			AllowPrivilegeEscalation: &no,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
}

// PodIPRef, in a container's args, stands for the pod's IP: the kubelet
// expands $(VAR) in args from the container's environment, where every pod
// of a job has POD_IP (downwardEnv). An AllReduce worker is told to listen
// for its ring peers on PodIPRef:port, so the address it registers with the
// master is one the other workers' pods can dial.
const PodIPRef = "$(POD_IP)"

// downwardEnv gives a container its pod's name, namespace and IP.
func downwardEnv() []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	return []corev1.EnvVar{
		field("POD_NAME", "metadata.name"),
		field("POD_NAMESPACE", "metadata.namespace"),
		field("POD_IP", "status.podIP"),
	}
}

// NewPod builds a pod of the job running `elasticdl <args...>`.
func NewPod(name, namespace string, labels map[string]string, s PodSettings, args []string, owner *metav1.OwnerReference) *corev1.Pod {
	podSec, containerSec := restrictedSecurity()
	p := &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Namespace:   namespace,
			Labels:      labels,
			Annotations: s.Annotations,
		},
		Spec: corev1.PodSpec{
			RestartPolicy:      corev1.RestartPolicyNever,
			ServiceAccountName: s.ServiceAccount,
			PriorityClassName:  s.PriorityClass,
			NodeSelector:       s.NodeSelector,
			SecurityContext:    podSec,
			Containers: []corev1.Container{{
				Name:            ContainerName,
				Image:           s.Image,
				ImagePullPolicy: s.ImagePullPolicy,
				Command:         []string{Command},
				Args:            args,
				Env:             append(downwardEnv(), s.Env...),
				EnvFrom:         s.EnvFrom,
				Resources:       s.Resources,
				SecurityContext: containerSec,
				// A process that fails says why in its last log line
				// (`elasticdl ROLE: cause`): the kubelet puts the log's tail
				// in the container's termination message, which the master
				// reads into the exit's message (classify.go).
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		},
	}
	for i, v := range s.Volumes {
		name := fmt.Sprintf("volume-%d", i)
		vol := corev1.Volume{Name: name}
		if v.ClaimName != "" {
			vol.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.ClaimName, ReadOnly: v.ReadOnly}
		} else {
			vol.HostPath = &corev1.HostPathVolumeSource{Path: v.HostPath}
		}
		p.Spec.Volumes = append(p.Spec.Volumes, vol)
		p.Spec.Containers[0].VolumeMounts = append(p.Spec.Containers[0].VolumeMounts,
			corev1.VolumeMount{Name: name, MountPath: v.MountPath, ReadOnly: v.ReadOnly})
	}
	if s.TerminationGracePeriod > 0 {
		g := s.TerminationGracePeriod
		p.Spec.TerminationGracePeriodSeconds = &g
	}
	if owner != nil {
		p.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return p
}

// AvoidNodes requires pod to be placed on none of nodes: a required node
// affinity on the node's name (matchFields metadata.name, which is the
// node itself, where the hostname label need not be), added to every term
// the pod already has, since terms are ORed.
func AvoidNodes(pod *corev1.Pod, nodes []string) {
	if len(nodes) == 0 {
		return
	}
	req := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpNotIn, Values: slices.Clone(nodes)}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	sel := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(sel.NodeSelectorTerms) == 0 {
		sel.NodeSelectorTerms = []corev1.NodeSelectorTerm{{}}
	}
	for i := range sel.NodeSelectorTerms {
		sel.NodeSelectorTerms[i].MatchFields = append(sel.NodeSelectorTerms[i].MatchFields, req)
	}
}

// newPSService builds the Service that keeps PS shard index reachable at
// one name across relaunches: it selects whichever pod serves the shard.
func newPSService(job, namespace string, index, port int, owner *metav1.OwnerReference) *corev1.Service {
	labels := JobLabels(job, string(cluster.PS))
	labels[LabelReplicaIndex] = strconv.Itoa(index)
	return newService(PSServiceName(job, index), namespace, labels, labels, port, owner)
}

// newService builds a Service of the job at port, selecting the pods
// with the labels sel.
func newService(name, namespace string, labels, sel map[string]string, port int, owner *metav1.OwnerReference) *corev1.Service {
	svc := &corev1.Service{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      name,
			Namespace: namespace,
			Labels:    labels,
		},
		Spec: corev1.ServiceSpec{
			Selector: sel,
			Ports: []corev1.ServicePort{{
				Name:       "grpc",
				Port:       int32(port),
				TargetPort: intstr.FromInt32(int32(port)),
				Protocol:   corev1.ProtocolTCP,
			}},
		},
	}
	if owner != nil {
		svc.OwnerReferences = []metav1.OwnerReference{*owner}
	}
	return svc
}

// JobOwner is the owner of what a master creates: the batch/v1 Job that
// runs master, so that a master pod deleted or evicted takes nothing with
// it and deleting the Job garbage-collects the whole job; or, for a master
// pod no Job controls, the pod itself. The reference is no controller
// reference: the Job controller releases the pods it controls that its
// selector does not match, which a worker's would not.
func JobOwner(master *corev1.Pod) *metav1.OwnerReference {
	t := true
	if c := metav1.GetControllerOf(master); c != nil && c.Kind == "Job" && strings.HasPrefix(c.APIVersion, "batch/") {
		return &metav1.OwnerReference{APIVersion: c.APIVersion, Kind: c.Kind, Name: c.Name, UID: c.UID, BlockOwnerDeletion: &t}
	}
	return &metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: master.Name, UID: master.UID, BlockOwnerDeletion: &t}
}

// Exit codes of a master pod, as its Job's pod failure policy reads them.
const (
	// ExitJobFailed: the job failed (the summary says why).
	ExitJobFailed = 1
	// ExitUsage: the command line is wrong; a new pod would fail alike.
	ExitUsage = 2
	// ExitHandedOver: the master stopped acting and left the job to the
	// next master (its pod was deleted, or its state could not be saved).
	ExitHandedOver = 3
)

// MasterPodReplacements is how many master pods that failed (not counting
// those evicted or preempted) a job's Job replaces before it gives up.
const MasterPodReplacements = 6

// NewMasterJob builds the batch/v1 Job that runs a job's master pod (built
// by NewPod; its name and owner are not used). The Job replaces a master pod
// that is deleted, evicted, preempted or that dies, and the new master
// resumes the job from its state ConfigMap; it does not replace one that
// ended the job (exit 0, ExitJobFailed) or was given a bad command line.
// A replacement starts only once the old pod has terminated, so that two
// masters never act at once.
func NewMasterJob(job, namespace string, master *corev1.Pod) *batchv1.Job {
	one, limit := int32(1), int32(MasterPodReplacements)
	failed := batchv1.Failed
	tmpl := corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: master.Labels, Annotations: master.Annotations}, Spec: master.Spec}
	return &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: MasterName(job), Namespace: namespace, Labels: master.Labels},
		Spec: batchv1.JobSpec{
			Parallelism:          &one,
			Completions:          &one,
			BackoffLimit:         &limit,
			PodReplacementPolicy: &failed,
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{
					Action: batchv1.PodFailurePolicyActionFailJob,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
						ContainerName: ptrTo(ContainerName),
						Operator:      batchv1.PodFailurePolicyOnExitCodesOpIn,
						Values:        []int32{ExitJobFailed, ExitUsage},
					},
				},
				{
					// Evicted, preempted, drained: no fault of the master's.
					Action:          batchv1.PodFailurePolicyActionIgnore,
					OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
				},
			}},
			Template: tmpl,
		},
	}
}

func ptrTo[T any](v T) *T { return &v }

// ParseResources parses "cpu=1,memory=2Gi,ephemeral-storage=1Gi" (the
// format of ElasticDL's --*_resource_request flags; "gpu=1" means
// nvidia.com/gpu).
func ParseResources(spec string) (corev1.ResourceList, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil
	}
	out := corev1.ResourceList{}
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("resources %q: want name=quantity[,name=quantity...], got %q", spec, kv)
		}
		if k == "gpu" {
			k = "nvidia.com/gpu"
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return nil, fmt.Errorf("resources %q: %s=%s: %w", spec, k, v, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("resources %q: %s must not be negative", spec, k)
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}

// Requirements is a container's resources from its requests and limits.
// An extended resource (a GPU: nvidia.com/gpu) cannot be overcommitted:
// Kubernetes wants it in the limits, equal to the request, so a request
// alone is copied there and a limit that differs is an error.
func Requirements(req, lim corev1.ResourceList) (corev1.ResourceRequirements, error) {
	for name, q := range req {
		if !strings.Contains(string(name), "/") {
			continue // cpu, memory, ...: may be overcommitted
		}
		if l, ok := lim[name]; ok {
			if l.Cmp(q) != 0 {
				return corev1.ResourceRequirements{}, fmt.Errorf("%s: request %s and limit %s must be equal (it cannot be overcommitted)", name, q.String(), l.String())
			}
			continue
		}
		if lim == nil {
			lim = corev1.ResourceList{}
		}
		lim[name] = q
	}
	return corev1.ResourceRequirements{Requests: req, Limits: lim}, nil
}

// ParseKeyValues parses "k=v,k2=v2" (node selectors, --envs).
func ParseKeyValues(spec string) (map[string]string, []string, error) {
	spec = strings.TrimSpace(spec)
	if spec == "" {
		return nil, nil, nil
	}
	m := map[string]string{}
	var order []string
	for _, kv := range strings.Split(spec, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok || k == "" {
			return nil, nil, fmt.Errorf("%q: want key=value[,key=value...], got %q", spec, kv)
		}
		if _, dup := m[k]; !dup {
			order = append(order, k)
		}
		m[k] = v
	}
	return m, order, nil
}

// WorkerPriorities resolves --worker_pod_priority for n worker slots: a
// PriorityClass name for all of them, or a fraction f in [0,1] that gives
// the first ceil(f*n) slots the high class and the others the low class,
// as ElasticDL did.
func WorkerPriorities(spec string, n int, high, low string) ([]string, error) {
	out := make([]string, n)
	if spec == "" {
		return out, nil
	}
	f, err := strconv.ParseFloat(spec, 64)
	if err != nil {
		if errs := validation.IsDNS1123Subdomain(spec); len(errs) > 0 {
			return nil, fmt.Errorf("worker pod priority %q: neither a fraction in [0,1] nor a PriorityClass name (%s)", spec, strings.Join(errs, "; "))
		}
		for i := range out {
			out[i] = spec
		}
		return out, nil
	}
	if f < 0 || f > 1 {
		return nil, fmt.Errorf("worker pod priority %q: a fraction must be in [0,1]", spec)
	}
	nHigh := int(f*float64(n) + 0.999999)
	for i := range out {
		if i < nHigh {
			out[i] = high
		} else {
			out[i] = low
		}
	}
	return out, nil
}
