package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	flag "github.com/spf13/pflag"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"elasticdl/internal/cluster/k8s"
	"elasticdl/internal/master"
	"elasticdl/internal/sqldb"
)

// k8sOptions are the flags of --backend=k8s: how the job's pods are built.
type k8sOptions struct {
	image, namespace, kubeconfig    string
	yaml, gang                      bool
	masterPriority, workerPriority  string
	psPriority, highClass, lowClass string
	masterRequest, masterLimit      string
	workerRequest, workerLimit      string
	psRequest, psLimit              string
	nodeSelector, serviceAccount    string
	volumes                         string
	imagePullPolicy, envs           string
	masterPort, psPort              int
	collectivePort                  int
	psHost, masterHost              string
	apiTimeout, workerGracePeriod   time.Duration
	dbPasswordSecret                string
	s3Secret                        string
	wait                            bool
	// networkPolicy and metricsNamespace: the job's NetworkPolicy
	// (k8stls.go).
	networkPolicy    bool
	metricsNamespace string
}

// clientOnlyFlags are read by the submitting client and not passed on to
// the master pod.
var clientOnlyFlags = map[string]bool{"backend": true, "yaml": true, "kubeconfig": true, "wait": true,
	"network_policy": true, "metrics_namespace": true}

func addK8sFlags(fs *flag.FlagSet, o *k8sOptions) {
	fs.StringVar(&o.image, "image", "", "k8s: container image with the elasticdl binary (deploy/Dockerfile); every pod of the job runs it")
	fs.StringVar(&o.namespace, "namespace", "default", "k8s: namespace of the job (it needs deploy/rbac.yaml applied)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "k8s: kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	fs.BoolVar(&o.yaml, "yaml", false, "k8s: print the job's manifests instead of creating them (`| kubectl apply -f -` submits the job): with --tls, first the Secret of the job's CA (it holds the CA's key; no owner: `elasticdl stop` deletes it), then the NetworkPolicy and the master's Job")
	fs.BoolVar(&o.networkPolicy, "network_policy", true, "k8s: create a NetworkPolicy, owned by the job, that lets into the job's pods only the job's own pods (and --metrics_namespace on the metrics ports); the submitting user needs create on networkpolicies")
	fs.StringVar(&o.metricsNamespace, "metrics_namespace", "", "k8s: namespace whose pods (a Prometheus) the job's NetworkPolicy lets reach the --metrics_port ports of the master and PS (empty: none)")
	fs.StringVar(&o.masterPriority, "master_pod_priority", "", "k8s: PriorityClass of the master pod")
	fs.StringVar(&o.workerPriority, "worker_pod_priority", "", "k8s: PriorityClass of the worker pods, or a fraction f in [0,1]: the first ceil(f*num_workers) workers get --high_priority_class, the others --low_priority_class")
	fs.StringVar(&o.psPriority, "ps_pod_priority", "", "k8s: PriorityClass of the parameter-server pods")
	fs.StringVar(&o.highClass, "high_priority_class", "elasticdl-high", "k8s: the high PriorityClass of a fractional --worker_pod_priority")
	fs.StringVar(&o.lowClass, "low_priority_class", "elasticdl-low", "k8s: the low PriorityClass of a fractional --worker_pod_priority")
	fs.StringVar(&o.masterRequest, "master_resource_request", "cpu=500m,memory=512Mi", "k8s: master pod requests, e.g. cpu=1,memory=1Gi")
	fs.StringVar(&o.masterLimit, "master_resource_limit", "", "k8s: master pod limits")
	fs.StringVar(&o.workerRequest, "worker_resource_request", "cpu=1,memory=1Gi", "k8s: worker pod requests (gpu=1 means nvidia.com/gpu)")
	fs.StringVar(&o.workerLimit, "worker_resource_limit", "", "k8s: worker pod limits")
	fs.StringVar(&o.psRequest, "ps_resource_request", "cpu=1,memory=1Gi", "k8s: parameter-server pod requests")
	fs.StringVar(&o.psLimit, "ps_resource_limit", "", "k8s: parameter-server pod limits")
	fs.StringVar(&o.nodeSelector, "node_selector", "", "k8s: node selector of every pod of the job, e.g. pool=training,zone=a")
	fs.StringVar(&o.volumes, "volume", "", "k8s: volumes of every pod, for data, --output and checkpoints: 'claim_name=C,mount_path=/data[,read_only=true]' or 'host_path=/h,mount_path=/p', several separated by ';'")
	fs.StringVar(&o.serviceAccount, "service_account", "elasticdl", "k8s: ServiceAccount of the master pod (deploy/rbac.yaml)")
	fs.StringVar(&o.imagePullPolicy, "image_pull_policy", "IfNotPresent", "k8s: Always, IfNotPresent or Never")
	fs.StringVar(&o.envs, "envs", "", "k8s: environment of every container, e.g. GODEBUG=x,FOO=bar")
	fs.IntVar(&o.masterPort, "master_port", 50001, "k8s: port of the master's gRPC service")
	fs.IntVar(&o.psPort, "ps_port", 2222, "k8s: port of PS shard 0; shard i serves on ps_port+i")
	fs.IntVar(&o.collectivePort, "collective_port", 0, "k8s, AllreduceStrategy: port on which each worker listens for its ring peers, at its pod IP (0: any free port, which the worker registers with the master; fix it where NetworkPolicies open only known ports)")
	fs.StringVar(&o.psHost, "ps_host", "", "k8s: host at which workers reach every PS instead of its Service (clusters without cluster DNS, e.g. the test rig: 127.0.0.1)")
	fs.StringVar(&o.masterHost, "master_host", "", "k8s: host at which workers and PS reach the master instead of its Service (clusters without cluster DNS, e.g. the test rig: 127.0.0.1)")
	fs.DurationVar(&o.apiTimeout, "api_timeout", 30*time.Second, "k8s: how long to wait for the API server before giving up")
	fs.BoolVar(&o.gang, "gang", false, "k8s: gang admission, the non-elastic baseline: the master launches no worker or PS until all --num_workers workers and --num_ps_pods PS fit at once in what the cluster's pods leave free, then launches them all (the master needs deploy/rbac-gang.yaml to see the nodes and pods)")
	fs.StringVar(&o.s3Secret, "s3_secret", "", "k8s: Secret whose keys every pod gets as environment variables: object storage's AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and, for a server other than AWS, AWS_ENDPOINT_URL and AWS_REGION, for s3:// data, checkpoints and --output (docs/kubernetes.md); no volume needed")
	fs.StringVar(&o.dbPasswordSecret, "db_password_secret", "", "k8s: Secret (key "+k8s.SecretKeyPassword+") whose value every pod gets as $"+sqldb.EnvPassword+", the password of a database URI without one; default: with $"+sqldb.EnvPassword+" set here and database data, a Secret the job owns is made of it (no pod spec holds the password)")
	fs.BoolVar(&o.wait, "wait", false, "k8s: wait for the job to end, print its summary, and exit non-zero when it failed")
	fs.DurationVar(&o.workerGracePeriod, "pod_grace_period", 10*time.Second, "k8s: grace period of worker and PS pods the master stops")
}

// check validates the k8s flags without contacting the cluster.
func (o k8sOptions) check() error {
	var errs []error
	if o.image == "" {
		errs = append(errs, errors.New("--image: required with --backend=k8s"))
	}
	for _, p := range []struct{ flag, v string }{
		{"master_resource_request", o.masterRequest}, {"master_resource_limit", o.masterLimit},
		{"worker_resource_request", o.workerRequest}, {"worker_resource_limit", o.workerLimit},
		{"ps_resource_request", o.psRequest}, {"ps_resource_limit", o.psLimit},
	} {
		if _, err := k8s.ParseResources(p.v); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", p.flag, err))
		}
	}
	if _, _, err := k8s.ParseKeyValues(o.nodeSelector); err != nil {
		errs = append(errs, fmt.Errorf("--node_selector: %w", err))
	}
	if envs, _, err := k8s.ParseKeyValues(o.envs); err != nil {
		errs = append(errs, fmt.Errorf("--envs: %w", err))
	} else if _, ok := envs[sqldb.EnvPassword]; ok {
		errs = append(errs, fmt.Errorf("--envs: %s would put the password in the pod spec: set it here, or give --db_password_secret", sqldb.EnvPassword))
	}
	if _, err := k8s.ParseVolumes(o.volumes); err != nil {
		errs = append(errs, fmt.Errorf("--volume: %w", err))
	}
	if _, err := k8s.WorkerPriorities(o.workerPriority, 1, o.highClass, o.lowClass); err != nil {
		errs = append(errs, fmt.Errorf("--worker_pod_priority: %w", err))
	}
	switch corev1.PullPolicy(o.imagePullPolicy) {
	case corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever:
	default:
		errs = append(errs, fmt.Errorf("--image_pull_policy: %q is not Always, IfNotPresent or Never", o.imagePullPolicy))
	}
	for _, p := range []struct {
		flag string
		v    int
	}{{"master_port", o.masterPort}, {"ps_port", o.psPort}} {
		if p.v < 1 || p.v > 65535 {
			errs = append(errs, fmt.Errorf("--%s: %d is not a port", p.flag, p.v))
		}
	}
	if o.collectivePort < 0 || o.collectivePort > 65535 {
		errs = append(errs, fmt.Errorf("--collective_port: %d is not a port (0: any)", o.collectivePort))
	}
	if o.apiTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--api_timeout: must be positive"))
	}
	if len(errs) > 0 {
		return usageError{errors.Join(errs...)}
	}
	return nil
}

// podSettings builds the settings of one kind of pod from the flags.
func (o k8sOptions) podSettings(priority, request, limit string) (k8s.PodSettings, error) {
	req, err := k8s.ParseResources(request)
	if err != nil {
		return k8s.PodSettings{}, err
	}
	lim, err := k8s.ParseResources(limit)
	if err != nil {
		return k8s.PodSettings{}, err
	}
	res, err := k8s.Requirements(req, lim)
	if err != nil {
		return k8s.PodSettings{}, err
	}
	sel, _, err := k8s.ParseKeyValues(o.nodeSelector)
	if err != nil {
		return k8s.PodSettings{}, err
	}
	envs, order, err := k8s.ParseKeyValues(o.envs)
	if err != nil {
		return k8s.PodSettings{}, err
	}
	vols, err := k8s.ParseVolumes(o.volumes)
	if err != nil {
		return k8s.PodSettings{}, err
	}
	s := k8s.PodSettings{
		Image:           o.image,
		ImagePullPolicy: corev1.PullPolicy(o.imagePullPolicy),
		PriorityClass:   priority,
		Resources:       res,
		NodeSelector:    sel,
		Volumes:         vols,
	}
	for _, k := range order {
		s.Env = append(s.Env, corev1.EnvVar{Name: k, Value: envs[k]})
	}
	if o.dbPasswordSecret != "" {
		s.Env = append(s.Env, k8s.SecretEnv(sqldb.EnvPassword, o.dbPasswordSecret, k8s.SecretKeyPassword))
	}
	if o.s3Secret != "" {
		s.EnvFrom = append(s.EnvFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: o.s3Secret}}})
	}
	return s, nil
}

// masterArgs is the master pod's command line: the job type and every flag
// the user set, except those only the client reads.
func masterArgs(fs *flag.FlagSet, mode string) []string {
	if mode == "" {
		mode = master.ModeTrain
	}
	args := []string{"master", "--job_type=" + mode}
	fs.Visit(func(f *flag.Flag) {
		if !clientOnlyFlags[f.Name] {
			args = append(args, "--"+f.Name+"="+f.Value.String())
		}
	})
	return args
}

// masterJob builds the Job that runs cfg's master, with its dashboard on
// dashboardPort (0: none).
func masterJob(fs *flag.FlagSet, cfg master.Config, o k8sOptions, dashboardPort int) (*batchv1.Job, error) {
	if err := k8s.CheckJobName(cfg.JobName); err != nil {
		return nil, usageError{fmt.Errorf("--job_name: %w", err)}
	}
	s, err := o.podSettings(o.masterPriority, o.masterRequest, o.masterLimit)
	if err != nil {
		return nil, usageError{err}
	}
	s.ServiceAccount = o.serviceAccount
	if cfg.MetricsPort > 0 {
		s.Annotations = k8s.ScrapeAnnotations(cfg.MetricsPort)
	}
	if dashboardPort > 0 {
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		s.Annotations[k8s.AnnotationDashboardPort] = strconv.Itoa(dashboardPort)
	}
	pod := k8s.NewPod("", o.namespace, k8s.JobLabels(cfg.JobName, k8s.ReplicaMaster), s, masterArgs(fs, cfg.Mode), nil)
	if dashboardPort > 0 {
		// Declared for port-forward and tools; never in the master's Service.
		pod.Spec.Containers[0].Ports = append(pod.Spec.Containers[0].Ports,
			corev1.ContainerPort{Name: k8s.PortNameDashboard, ContainerPort: int32(dashboardPort), Protocol: corev1.ProtocolTCP})
	}
	mj := k8s.NewMasterJob(cfg.JobName, o.namespace, pod)
	// What an autoscaler needs to size the job.
	mj.Annotations = map[string]string{
		k8s.AnnotationMinWorkers:    strconv.Itoa(cfg.MinWorkers),
		k8s.AnnotationMaxWorkers:    strconv.Itoa(cfg.NumWorkers),
		k8s.AnnotationWorkerRequest: o.workerRequest,
	}
	return mj, nil
}

// submitK8s creates the job's master Job (or prints it, with --yaml);
// with --wait it waits for the job to end.
func submitK8s(ctx context.Context, env Env, fs *flag.FlagSet, cfg master.Config, o jobOptions) error {
	pw, err := podPassword(fs, &cfg)
	if err != nil {
		return err
	}
	password := ""
	if pw != "" && o.k8s.dbPasswordSecret == "" && usesDatabase(cfg) {
		if o.k8s.yaml {
			return usageError{fmt.Errorf("a database password ($%s, or in a data URI) with --yaml: a manifest holds no password; create a Secret with key %s and give --db_password_secret", sqldb.EnvPassword, k8s.SecretKeyPassword)}
		}
		password = pw
		// The pods get it from the Secret made below, by this name.
		if err := fs.Set("db_password_secret", k8s.DBPasswordSecretName(cfg.JobName)); err != nil {
			return err
		}
		o.k8s.dbPasswordSecret = k8s.DBPasswordSecretName(cfg.JobName)
	}
	mj, err := masterJob(fs, cfg, o.k8s, o.k8sDashboardPort())
	if err != nil {
		return err
	}
	objs, err := newJobObjects(mj, cfg, o)
	if err != nil {
		return err
	}
	if o.k8s.yaml {
		return printManifests(env, mj, objs)
	}
	client, err := k8s.Connect(o.k8s.kubeconfig, o.k8s.apiTimeout)
	if err != nil {
		return err
	}
	if err := createJob(ctx, client, mj, cfg, o.k8s, password, objs); err != nil {
		return err
	}
	ns := o.k8s.namespace
	fmt.Fprintf(env.Stdout, "job %s submitted: Job %s in namespace %s runs its master\n", cfg.JobName, mj.Name, ns)
	fmt.Fprintf(env.Stdout, "  follow:  elasticdl logs %s --namespace=%s -f   (kubectl logs -f -n %s job/%s)\n", cfg.JobName, ns, ns, mj.Name)
	fmt.Fprintf(env.Stdout, "  status:  elasticdl status %s --namespace=%s   (kubectl get pods -n %s -l %s)\n", cfg.JobName, ns, ns, k8s.JobSelector(cfg.JobName))
	fmt.Fprintf(env.Stdout, "  stop:    elasticdl stop %s --namespace=%s\n", cfg.JobName, ns)
	if !o.k8s.wait {
		return nil
	}
	return waitK8s(ctx, env, client, cfg.JobName, ns)
}

// createJob creates the master Job, and first the Secrets its pods read
// (the job's CA, the database password), which the Job then owns, as it
// does the NetworkPolicy made after it.
func createJob(ctx context.Context, client *k8s.Client, mj *batchv1.Job, cfg master.Config, o k8sOptions, password string, objs jobObjects) error {
	undo, err := createSecrets(ctx, client, cfg, o, password, objs)
	if err == nil {
		err = client.SubmitJob(ctx, mj, priorityClasses(cfg, o))
	}
	if err != nil {
		if derr := undo(); derr != nil {
			err = fmt.Errorf("%w (and %v)", err, derr)
		}
		var pe *k8s.PriorityClassError
		if errors.As(err, &pe) {
			return usageError{err}
		}
		return err
	}
	return ownObjects(ctx, client, cfg, o, password, objs)
}

// waitK8s waits for a submitted job to end and prints its summary; a job
// that failed is an error.
func waitK8s(ctx context.Context, env Env, client *k8s.Client, job, ns string) error {
	st, err := client.WaitJob(ctx, ns, job, time.Second)
	if err != nil {
		return fmt.Errorf("wait for job %s: %w", job, err)
	}
	if st.Summary != nil {
		var s master.Summary
		if err := json.Unmarshal(st.Summary, &s); err == nil {
			printSummary(env, &s, "ConfigMap "+k8s.SummaryConfigMapName(job), "elasticdl logs "+job)
		}
	}
	if st.Result != k8s.StatusFinished {
		reason := ""
		if st.Condition != "" {
			reason = " (" + st.Condition + ")"
		}
		return fmt.Errorf("job %s %s%s: elasticdl logs %s --namespace=%s", job, st.Result, reason, job, ns)
	}
	return nil
}

// podPassword takes the database password out of the job's data URIs,
// which the master pod's arguments hold, or else from $ELASTICDL_DB_PASSWORD.
func podPassword(fs *flag.FlagSet, cfg *master.Config) (string, error) {
	pw := ""
	for _, d := range []struct {
		flag string
		uri  *string
	}{{"training_data", &cfg.TrainingData}, {"validation_data", &cfg.ValidationData}, {"prediction_data", &cfg.PredictionData}} {
		p := sqldb.Password(*d.uri)
		if !sqldb.IsURI(*d.uri) || p == "" {
			continue
		}
		if pw != "" && p != pw {
			return "", usageError{fmt.Errorf("--%s: another password than the other data's: a job takes one ($%s)", d.flag, sqldb.EnvPassword)}
		}
		pw, *d.uri = p, sqldb.StripPassword(*d.uri)
		if err := fs.Set(d.flag, *d.uri); err != nil {
			return "", err
		}
	}
	if pw == "" {
		pw = os.Getenv(sqldb.EnvPassword)
	}
	return pw, nil
}

// usesDatabase says whether a job reads a database (and so may need its
// password).
func usesDatabase(cfg master.Config) bool {
	return sqldb.IsURI(cfg.TrainingData) || sqldb.IsURI(cfg.ValidationData) || sqldb.IsURI(cfg.PredictionData)
}

// priorityClasses are the PriorityClasses the job's pods ask for, for the
// preflight to check, each with the flag that named it.
func priorityClasses(cfg master.Config, o k8sOptions) []k8s.PriorityClassUse {
	uses := []k8s.PriorityClassUse{{Flag: "master_pod_priority", Class: o.masterPriority}, {Flag: "ps_pod_priority", Class: o.psPriority}}
	workers, _ := k8s.WorkerPriorities(o.workerPriority, cfg.NumWorkers, o.highClass, o.lowClass)
	for _, c := range workers {
		uses = append(uses, k8s.PriorityClassUse{Flag: "worker_pod_priority", Class: c})
	}
	return uses
}

// jobTypeArg removes --job_type=X (or --job_type X) from args.
func jobTypeArg(args []string) (string, []string) {
	mode := master.ModeTrain
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case strings.HasPrefix(a, "--job_type=") || strings.HasPrefix(a, "-job_type="):
			mode = a[strings.Index(a, "=")+1:]
		case (a == "--job_type" || a == "-job_type") && i+1 < len(args):
			mode = args[i+1]
			i++
		default:
			rest = append(rest, a)
		}
	}
	return mode, rest
}

// portAddr is host:port.
func portAddr(host string, port int) string { return host + ":" + strconv.Itoa(port) }
