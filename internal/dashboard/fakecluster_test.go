package dashboard

import (
	"math"
	"testing"
)

// fakeCluster is four minutes of an autoscaler's rounds: job ns/a alone,
// ns/b arriving at 60 s, a node added at 100 s, services growing at 120 s
// (services first), ns/c arriving at 150 s.
type fakeCluster struct {
	samples   []obj
	decisions []obj
	jobs      map[string]obj
}

func newFakeCluster() *fakeCluster {
	c := &fakeCluster{jobs: map[string]obj{}}
	decide := func(s float64, job string, from, to int, reason string) {
		c.decisions = append(c.decisions, obj{"at": at(s), "job": job, "from": from, "to": to, "reason": reason})
	}
	decide(0, "ns/a", 0, 5, "room")
	decide(60, "ns/b", 0, 2, "room")
	decide(60, "ns/a", 5, 3, "share")
	decide(100, "ns/b", 2, 4, "room")
	decide(120, "ns/a", 3, 2, "services-first (2 waiting)")
	decide(150, "ns/c", 0, 1, "min-unfit")
	for s := 0; s < 240; s++ {
		c.sample(s)
	}
	return c
}

// targets are the jobs' targets at s seconds, per the decisions.
func (c *fakeCluster) targets(s int) map[string]int {
	t := map[string]int{}
	for _, d := range c.decisions {
		if at(float64(s)) >= d["at"].(string) {
			t[d["job"].(string)] = d["to"].(int)
		}
	}
	return t
}

// sample adds the round at s seconds: each job's workers run 3 s after
// its target rises; a worker and the master take 1 and 0.5 CPU.
func (c *fakeCluster) sample(s int) {
	capacity, services := 8.0, 1.75+0.2*math.Sin(float64(s)/9)
	if s >= 100 {
		capacity = 12
	}
	if s >= 120 {
		services += 1.5
	}
	jobs := obj{}
	for job, target := range c.targets(s) {
		running := min(target, c.targets(max(s-3, 0))[job])
		cpu := float64(running) + 0.5
		jobs[job] = obj{"cpu": cpu, "target": target, "running": running, "pending": target - running}
		c.jobs[job] = obj{"job": job, "min": 1, "max": 6, "target": target, "placed": target, "running": running,
			"pending": target - running, "cpu": cpu, "reason": c.reason(job)}
	}
	c.samples = append(c.samples, obj{"t": at(float64(s)), "capacity_cpu": capacity, "services_cpu": services, "jobs": jobs})
}

func (c *fakeCluster) reason(job string) string {
	r := ""
	for _, d := range c.decisions {
		if d["job"] == job {
			r = d["reason"].(string)
		}
	}
	return r
}

func (c *fakeCluster) clusterDoc() obj {
	last := c.samples[len(c.samples)-1]
	jobs := []obj{}
	for _, name := range []string{"ns/a", "ns/b", "ns/c"} {
		if j, ok := c.jobs[name]; ok {
			jobs = append(jobs, j)
		}
	}
	return obj{"at": last["t"], "interval_seconds": 1, "capacity_cpu": last["capacity_cpu"],
		"services_cpu": last["services_cpu"], "pending_service_pods": 0, "jobs": jobs}
}

func (c *fakeCluster) snapshot(t *testing.T) (snap []byte, docs map[string][]byte) {
	series := obj{"stride_seconds": 1, "samples": c.samples}
	decisions := obj{"decisions": c.decisions}
	d := encodeDocs(t, obj{"cluster": c.clusterDoc(), "cluster/series": series, "cluster/decisions": decisions})
	docs = map[string][]byte{}
	for k, v := range d {
		docs[k] = v
	}
	return encode(t, obj{"cluster": c.clusterDoc(), "series": series, "decisions": decisions}), docs
}
