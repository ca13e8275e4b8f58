package k8s

import (
	"context"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Recorder writes Kubernetes Events about one object (the master's Job), so
// that `kubectl describe job` and `kubectl get events` show the job's story:
// relaunches, preemptions, epoch ends, the job's end. Notify never blocks
// the caller: events are written by one goroutine, and dropped (logged) if
// the API server falls far behind.
type Recorder struct {
	client    kubernetes.Interface
	subject   corev1.ObjectReference
	instance  string
	component string
	log       *slog.Logger

	ch   chan corev1.Event
	done chan struct{}
	once sync.Once
}

// recorderBacklog is how many events may wait for the API server.
const recorderBacklog = 256

// NewRecorder returns a running Recorder of Events about subject, reported
// by instance (the master pod's name); Close flushes it.
func NewRecorder(client kubernetes.Interface, subject corev1.ObjectReference, instance, component string, logger *slog.Logger) *Recorder {
	if logger == nil {
		logger = slog.Default()
	}
	r := &Recorder{
		client:    client,
		subject:   subject,
		instance:  instance,
		component: component,
		log:       logger,
		ch:        make(chan corev1.Event, recorderBacklog),
		done:      make(chan struct{}),
	}
	go r.run()
	return r
}

// Notify queues an Event of type Warning (warning) or Normal.
func (r *Recorder) Notify(warning bool, reason, message string) {
	typ := corev1.EventTypeNormal
	if warning {
		typ = corev1.EventTypeWarning
	}
	now := metav1.NewTime(time.Now())
	ev := corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: r.subject.Name + ".",
			Namespace:    r.subject.Namespace,
		},
		InvolvedObject:      r.subject,
		Reason:              reason,
		Message:             message,
		Type:                typ,
		Source:              corev1.EventSource{Component: r.component},
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		ReportingController: "elasticdl.io/" + r.component,
		ReportingInstance:   r.instance,
	}
	select {
	case r.ch <- ev:
	default:
		r.log.Warn("event dropped: the API server is behind", "reason", reason, "message", message)
	}
}

func (r *Recorder) run() {
	defer close(r.done)
	for ev := range r.ch {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := r.client.CoreV1().Events(r.subject.Namespace).Create(ctx, &ev, metav1.CreateOptions{})
		cancel()
		if err != nil {
			r.log.Warn("write event", "reason", ev.Reason, "err", err)
		}
	}
}

// Close writes what is queued (bounded by ctx) and stops the Recorder.
// Notify must not be called after Close.
func (r *Recorder) Close(ctx context.Context) {
	r.once.Do(func() { close(r.ch) })
	select {
	case <-r.done:
	case <-ctx.Done():
	}
}
