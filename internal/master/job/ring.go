package job

import (
	"fmt"
	"slices"
	"time"

	"elasticdl/internal/cluster"
)

// The rendezvous of an AllReduce job. Workers average their gradients in
// a ring among themselves; the master keeps who is in the ring and a
// version that changes whenever the ring must re-form: a worker joins, a
// member is lost (exit, preemption, silence) or a member reports the ring
// broken. Each version's ring forms as soon as every worker expected in it
// has checked in (JoinRing) — no fixed wait — and only a member that does
// not check in (a frozen process the backend still calls running) holds it
// up, for at most RingGrace, after which the ring forms without it.
//
// Workers poll RingStatus between steps (in the background) and re-join
// when the version moves; the step in flight when a ring breaks is not
// applied by the ring that failed, and is redone in the next.
//
// A change nobody failed — a worker joins, or the job lets a member go —
// is planned: the version moves but the live ring is not broken. Its
// members learn of the change from RingStatus, flag it in their next
// step's buffer, and all leave the ring at the end of that step (every
// member sees the flag in the same step), so no step fails; a member let
// go then checks in, is told to leave (Reply.LetGo) and is stopped. A
// loss or a break while a planned change waits makes it unplanned.

// RingMember is one worker of a ring and where its collective listener is.
type RingMember struct {
	Worker int
	Addr   string
}

// Ring is a rendezvous version and, once formed, its members in rank
// order (by worker ID). Members is nil while the version is forming.
type Ring struct {
	Version int64
	Members []RingMember
	// Lineage and Restore: see restore.go. A member whose state is not of
	// Lineage brings none; if no member has one, the ring starts from
	// Restore.
	Lineage int64
	Restore RestorePoint
	// Planned: the version forms after a planned change; the members of
	// the live ring finish it at a common step boundary.
	Planned bool
}

// JoinRing is a worker checking in for the next ring with the address of
// its collective listener: at start, and whenever its ring broke or
// RingStatus showed a newer version. The reply's Ring is the formed ring
// the worker is in, or nil: ask again shortly.
type JoinRing struct {
	Worker int
	Addr   string
}

// RingStatus asks for the current version (Reply.Ring; Members nil while
// it forms), so a member learns at its next step that it must re-join.
type RingStatus struct{ Worker int }

// RingBroken is a member reporting that a collective operation of ring
// Version failed (a peer died, froze or left).
type RingBroken struct {
	Worker  int
	Version int64
	Err     string
}

func (JoinRing) isEvent()   {}
func (RingStatus) isEvent() {}
func (RingBroken) isEvent() {}

// rendezvous is the core's ring state.
type rendezvous struct {
	version int64
	members []RingMember // the formed ring of version; nil while forming
	forming bool
	// joined are the check-ins for the forming version; deadline is when
	// it forms with them even if an expected member has not checked in.
	joined   map[int]string
	deadline time.Time
	// addrs are the addresses of every worker that ever joined, until it is
	// lost: such a worker is expected in the next ring.
	addrs map[int]string
	// formedAt is when the current ring formed; changedAt when the version
	// last moved (the start of a membership change).
	formedAt, changedAt time.Time
	maxWorldSize        int
	// prev are the members of the last formed ring: they hold the state
	// of every step it confirmed, and a new ring must include one of them
	// while any is alive, or it would train on from an older state.
	prev map[int]bool
	// members ever in a formed ring: only they hold a trained model.
	everMember map[int]bool
	checksums  []WorkerChecksum
	// unsettled are lost ring members whose tasks wait, until a new ring
	// settles or the deadline passes, for the survivors to commit what of
	// them the survivors' state includes.
	unsettled map[int]time.Time
	// lineage counts the states the job has trained: 1 from the first
	// ring, one more each time every member of the last ring was lost.
	// restore is where a ring of a new lineage starts from.
	lineage int64
	restore RestorePoint
	// restores counts the lineages after the first; stepsLost the applied
	// steps they undid.
	restores  int
	stepsLost int64
	// planned: the forming version is a planned change (see above).
	planned bool
	// leaving are members being let go: they are not expected in the next
	// ring; false while still stepping in the live ring, true once they
	// reached the boundary (being stopped).
	leaving map[int]bool
	// broken counts the versions members reported broken (each failed a
	// step, redone, or its forming); brokenAt is the newest of them.
	broken   int
	brokenAt int64
	ringTiming
}

// RingSummary is the rendezvous of an AllReduce job, for the summary.
type RingSummary struct {
	// Versions counts the rings formed or re-formed; MaxWorldSize is the
	// most members a ring had.
	Versions     int64 `json:"versions"`
	MaxWorldSize int   `json:"max_world_size"`
	WorldSize    int   `json:"world_size"`
	// Checksums of the parameters each worker uploaded at the end: equal
	// on every member (they apply the same updates).
	Checksums []WorkerChecksum `json:"checksums,omitempty"`
	// Restores counts the times every member of a ring was lost and the
	// job went on from its last checkpoint (or the initial model);
	// StepsLost the applied steps those restores undid (their records
	// were trained again); Checkpoint the newest restore point.
	Restores   int   `json:"restores"`
	StepsLost  int64 `json:"steps_lost"`
	Checkpoint int64 `json:"checkpoint"`
	// Broken counts the ring versions members reported broken: each
	// failed a step (redone by the next ring) or its own forming. Planned
	// changes (joins, workers let go) break none.
	Broken int `json:"broken"`
	// Recoveries: each membership change and how long until the next
	// committed step; Joins: each worker's first committed step after its
	// process started.
	Recoveries []RingRecovery `json:"recoveries,omitempty"`
	Joins      []RingJoin     `json:"joins,omitempty"`
	// Allreduce sums the workers' collective counters.
	Allreduce CollectiveStats `json:"allreduce"`
}

func (j *Job) joinRing(now time.Time, ev JoinRing) (Reply, error) {
	r, err := j.joinRingFormed(now, ev)
	if err == nil && r.Ring != nil && r.Ring.Members != nil {
		// Others may have committed on this worker's behalf meanwhile.
		r.Held = j.disp.Held(ev.Worker)
	}
	return r, err
}

func (j *Job) joinRingFormed(now time.Time, ev JoinRing) (Reply, error) {
	if !j.cfg.AllReduce {
		return Reply{}, fmt.Errorf("%w: JoinRing in a job without AllReduce", ErrRejected)
	}
	if ev.Addr == "" {
		return Reply{}, fmt.Errorf("%w: JoinRing of worker %d without an address", ErrInvalid, ev.Worker)
	}
	if err := j.seen(ev.Worker, now); err != nil {
		return Reply{}, err
	}
	if j.phase.over() {
		return Reply{}, fmt.Errorf("%w: the job's tasks are done: no ring forms any more", ErrRejected)
	}
	r := &j.ring
	if left, leaving := r.leaving[ev.Worker]; leaving && !left {
		// A member let go reached the step boundary: it stops here.
		r.leaving[ev.Worker] = true
		why := "scaled down"
		if j.beingParked(ev.Worker) {
			why = "parked (slow)"
		}
		j.letGo(now, ev.Worker, why+": left the ring at a step boundary")
		delete(r.leaving, ev.Worker)
		return Reply{LetGo: true}, nil
	}
	if !r.forming {
		i := slices.IndexFunc(r.members, func(m RingMember) bool { return m.Worker == ev.Worker })
		if i >= 0 && r.members[i].Addr == ev.Addr {
			return Reply{Ring: j.currentRing()}, nil // a retried call: it is in
		}
		// A newcomer (planned: the members finish their steps first), or a
		// member whose ring broke before the master heard or with a new
		// address: the ring must re-form.
		j.reform(now, fmt.Sprintf("worker %d joins", ev.Worker), i < 0)
	}
	if r.planned && r.prev[ev.Worker] {
		// The live ring's members reached the boundary together: the others
		// check in at once.
		r.deadline = earliest(r.deadline, now.Add(j.cfg.RingGrace))
	}
	r.addrs[ev.Worker] = ev.Addr
	r.joined[ev.Worker] = ev.Addr
	j.maybeForm(now)
	if r.forming {
		return Reply{}, nil
	}
	return Reply{Ring: j.currentRing()}, nil
}

func (j *Job) ringStatus(now time.Time, ev RingStatus) (Reply, error) {
	if err := j.seen(ev.Worker, now); err != nil {
		return Reply{}, err
	}
	return Reply{Ring: j.currentRing()}, nil
}

func (j *Job) ringBroken(now time.Time, ev RingBroken) (Reply, error) {
	if err := j.seen(ev.Worker, now); err != nil {
		return Reply{}, err
	}
	r := &j.ring
	if ev.Version > r.brokenAt {
		r.broken++
		r.brokenAt = ev.Version
	}
	switch {
	case ev.Version == r.version && !r.forming:
		j.reform(now, fmt.Sprintf("worker %d reports ring %d broken: %s", ev.Worker, ev.Version, ev.Err), false)
	case ev.Version == r.version-1:
		// The live ring of a planned change broke before its boundary: its
		// members must leave it at once. (Otherwise the report came late:
		// the ring re-formed.)
		j.unplan(now)
	}
	return Reply{Ring: j.currentRing()}, nil
}

// currentRing is the version and, once formed, its members.
func (j *Job) currentRing() *Ring {
	r := &j.ring
	if r.forming {
		return &Ring{Version: r.version, Lineage: r.lineage, Planned: r.planned}
	}
	return &Ring{Version: r.version, Members: slices.Clone(r.members), Lineage: r.lineage, Restore: r.restore}
}

// plannedBoundaryWait is how long a planned change waits for the live
// ring's members to reach their step boundary before the grace starts:
// a step, and an evaluation task between two steps, may take a while.
const plannedBoundaryWait = 10 * time.Second

// reform starts a new version: every worker expected in it must check in.
// A planned one leaves the live ring running to a common step boundary.
func (j *Job) reform(now time.Time, why string, planned bool) {
	r := &j.ring
	r.noteChange(now, why)
	j.occur(Occurrence{Kind: OccurRingReform, Cause: why, Version: r.version + 1, From: len(r.members)})
	r.version++
	r.members, r.forming, r.changedAt = nil, true, now
	r.joined = map[int]string{}
	r.planned = planned
	r.deadline = now.Add(j.cfg.RingGrace)
	if planned {
		r.deadline = r.deadline.Add(plannedBoundaryWait)
	}
	j.log.Info("ring re-forming", "version", r.version, "why", why, "planned", planned)
}

func earliest(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// unplan turns a forming planned change into an unplanned one: the live
// ring it waited on failed, so its members are told to leave it now.
func (j *Job) unplan(now time.Time) {
	r := &j.ring
	if r.forming && r.planned {
		r.planned = false
		r.deadline = earliest(r.deadline, now.Add(j.cfg.RingGrace))
		j.log.Info("planned ring change becomes unplanned: the live ring failed", "version", r.version)
	}
}

// stepping reports whether worker takes part in the live ring's steps: a
// member of the formed ring, or of the last one while a planned change
// waits for it to reach the boundary.
func (r *rendezvous) stepping(worker int) bool {
	if !r.forming {
		return slices.ContainsFunc(r.members, func(m RingMember) bool { return m.Worker == worker })
	}
	_, joined := r.joined[worker]
	return r.planned && r.prev[worker] && !joined && !r.leaving[worker]
}

// leaveRing lets go of a member of the live ring without failing a step:
// a planned change, which it leaves at the boundary, then is stopped.
func (j *Job) leaveRing(now time.Time, worker int, why string) {
	r := &j.ring
	j.draining[worker] = now
	if r.leaving == nil {
		r.leaving = map[int]bool{}
	}
	r.leaving[worker] = false
	j.log.Info("worker leaves the ring at its next step boundary", "worker", worker, "why", why)
	if !r.forming {
		j.reform(now, cluster.InstanceName(cluster.Worker, worker)+" let go: "+why, true)
	}
}

// maybeForm forms the forming version once every expected worker has
// checked in, or once the grace period is over with whoever did.
func (j *Job) maybeForm(now time.Time) {
	r := &j.ring
	if !r.forming || len(r.joined) == 0 {
		return
	}
	var missing []int
	for w := range r.addrs {
		if _, leaving := r.leaving[w]; leaving {
			continue // let go: it stops once it reaches the boundary
		}
		if _, ok := r.joined[w]; !ok {
			if in := j.workers[w]; in != nil && in.running {
				missing = append(missing, w)
			}
		}
	}
	if len(missing) > 0 && now.Before(r.deadline) {
		return
	}
	keeps, lost := j.keepsState()
	if !keeps {
		return
	}
	if lost || r.lineage == 0 {
		j.newLineage(now, lost)
	}
	slices.Sort(missing)
	for _, w := range missing {
		// It did not check in in time: it re-joins (and the ring re-forms)
		// when it comes back.
		delete(r.addrs, w)
	}
	r.members = r.members[:0]
	for w, addr := range r.joined {
		r.members = append(r.members, RingMember{Worker: w, Addr: addr})
		r.everMember[w] = true
	}
	slices.SortFunc(r.members, func(a, b RingMember) int { return a.Worker - b.Worker })
	j.occur(Occurrence{Kind: OccurRingFormed, Version: r.version, From: len(r.prev), To: len(r.members)})
	r.forming, r.joined, r.formedAt, r.planned = false, nil, now, false
	r.prev = map[int]bool{}
	for _, m := range r.members {
		r.prev[m.Worker] = true
	}
	r.maxWorldSize = max(r.maxWorldSize, len(r.members))
	j.log.Info("ring formed", "version", r.version, "world_size", len(r.members), "left_out", missing,
		"formed_in", now.Sub(r.changedAt))
}

// keepsState reports whether the forming ring may form with the workers
// that checked in: it includes a member of the last ring, or none of those
// is alive any more (lost: their state is gone; the ring starts a new
// lineage from the restore point).
func (j *Job) keepsState() (keeps, lost bool) {
	r := &j.ring
	alive := false
	for w := range r.prev {
		if _, ok := r.joined[w]; ok {
			return true, false
		}
		if _, ok := j.workers[w]; ok {
			alive = true
		}
	}
	if alive {
		return false, false // wait for a holder of the state to check in
	}
	return true, len(r.prev) > 0
}

// ringMemberLost drops a lost worker from the rendezvous: a formed ring it
// was in must re-form; a forming one no longer waits for it.
func (j *Job) ringMemberLost(now time.Time, worker int) {
	r := &j.ring
	if !j.cfg.AllReduce {
		return
	}
	stepping := r.stepping(worker)
	delete(r.addrs, worker)
	delete(r.leaving, worker)
	if r.forming {
		delete(r.joined, worker)
		if stepping {
			j.unplan(now) // the live ring lost a member before the boundary
		}
		j.maybeForm(now)
		return
	}
	if stepping {
		j.reform(now, cluster.InstanceName(cluster.Worker, worker)+" lost", false)
	}
}
