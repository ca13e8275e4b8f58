// The job's page: the stream's documents (docs/dashboard.md) drawn with
// Charts (chart.js). Test hooks (markup, not API): svg[data-series][data-n],
// [data-slot][data-state], #events li[data-kind][data-cause],
// document.body.dataset.seq.
(function () {
  'use strict';
  var C = Charts;
  var doc = null;       // the stream's document, deltas merged in
  var got = 0;          // Date.now() when the job document came
  var skew = 0;         // the master's clock minus ours, from the job document
  var ended = false;
  var $ = function (id) { return document.getElementById(id); };
  var LOST = {killed: 1, preempted: 1, 'oom-killed': 1, silent: 1};
  var color = {pending: '#cbd5e1', running: '#22c55e', lost: '#dc2626', letgo: '#2563eb', other: '#6b7280',
    loss: '#2563eb', evalLoss: '#ea580c', accuracy: '#7c3aed', rps: '#2563eb', workers: '#16a34a',
    ring: '#7c3aed', reshard: '#ea580c', slow: '#d97706', recovered: '#0d9488'};

  var text = C.text, ms = C.ms, clock = C.clock, cell = C.cell;

  // now is the master's time (ms), frozen at the end.
  function now() {
    if (ended && doc && doc.job && doc.job.started_at) return ms(doc.job.started_at) + doc.job.elapsed_seconds * 1000;
    return Date.now() + skew;
  }

  // origin is the time axes' zero: the job's start, else its first sample.
  function origin() {
    var j = doc.job || {}, s = (doc.series || {}).samples || [];
    return ms(j.started_at) || (s.length ? ms(s[0].t) : null) || now();
  }

  function header() {
    var j = doc.job || {}, w = j.workers || {}, ps = j.ps || {};
    $('job').textContent = text(j.job) || 'job';
    var ph = $('phase');
    ph.textContent = text(j.phase);
    ph.dataset.phase = text(j.phase);
    $('model').textContent = [j.model, j.strategy, j.mode].filter(Boolean).join(' · ');
    $('progress').textContent = 'epoch ' + text(j.epoch) + '/' + text(j.num_epochs) + ' · ' +
      C.num(j.records_done) + ' / ' + C.num(j.records_total) + ' records · workers ' + text(w.running) +
      ' running, ' + text(w.pending) + ' pending (target ' + text(w.target) + ', ' + text(w.min) + '–' + text(w.max) +
      ') · PS ' + text(ps.running) + '/' + text(ps.count) + (j.ring && j.ring.version ? ' · ring v' + j.ring.version : '');
    tick();
  }

  // tick moves the elapsed time and the ETA on between documents.
  function tick() {
    var j = doc && doc.job;
    if (!j) return;
    var since = ended || j.phase === 'succeeded' || j.phase === 'failed' ? 0 : (Date.now() - got) / 1000;
    $('elapsed').textContent = C.duration(j.elapsed_seconds + since);
    $('eta').textContent = j.eta_seconds === null || j.eta_seconds === undefined ? '–' : C.duration(Math.max(0, j.eta_seconds - since));
  }

  function epochs() {
    var tb = $('epochs').tBodies[0];
    tb.textContent = '';
    ((doc.job || {}).epochs || []).forEach(function (e) {
      var tr = document.createElement('tr');
      tr.dataset.epoch = e.epoch;
      cell(tr, e.epoch);
      cell(tr, C.num(e.records));
      cell(tr, C.num(e.trained), e.trained >= e.records && e.records > 0 ? 'good' : '');
      cell(tr, C.num(e.twice), e.twice > 0 ? 'bad' : '');
      cell(tr, C.num(e.missed), e.missed > 0 ? 'bad' : '');
      cell(tr, e.final ? 'final' : 'open');
      tb.appendChild(tr);
    });
  }

  function lossChart() {
    var s = doc.series || {}, samples = s.samples || [], evals = s.evals || [];
    var pts = samples.map(function (p) { return [p.records, p.gap ? null : p.loss]; });
    C.plot($('loss'), {x: {label: 'records', zero: true}, y: {label: 'loss', zero: true},
      y2: {label: 'accuracy', min: 0, max: 1},
      layers: [
        {type: 'line', points: pts, color: color.loss, label: 'training loss', dots: true},
        {type: 'markers', shape: 'diamond', color: color.evalLoss, label: 'eval loss', points: evals.map(function (e) {
          return [e.records_trained, e.loss, 'eval v' + e.version + ': loss ' + C.num(e.loss)];
        })},
        {type: 'markers', axis: 'y2', color: color.accuracy, label: 'eval accuracy', points: evals.map(function (e) {
          return [e.records_trained, e.accuracy, 'eval v' + e.version + ': accuracy ' + C.num(e.accuracy)];
        })}]});
  }

  function rpsChart(t0, end) {
    var s = doc.series || {}, samples = s.samples || [], tl = doc.timeline || {};
    var x = function (t) { return (ms(t) - t0) / 1000; };
    var marks = (tl.ring || []).map(function (r) {
      return {x: x(r.at), color: color.ring, label: 'v' + r.version + ' · ' + C.num(r.seconds) + ' s',
        title: 'ring v' + r.version + ' re-formed in ' + C.num(r.seconds) + ' s: ' + text(r.cause)};
    }).concat((tl.reshards || []).map(function (r) {
      return {x: x(r.at), color: color.reshard, label: 'PS ' + r.from + '→' + r.to + ' · ' + C.num(r.seconds) + ' s',
        title: 'PS re-sharded ' + r.from + ' → ' + r.to + ' (layout ' + r.layout + ') in ' + C.num(r.seconds) + ' s'};
    }));
    C.plot($('rps'), {x: {time: true, min: 0, max: Math.max(end, 1)}, y: {label: 'records/s', zero: true},
      y2: {label: 'workers', min: 0, max: Math.max(2, Math.ceil(Math.max.apply(null, samples.map(function (p) {
        return Math.max(p.workers_running, p.target);
      }).concat([0])) * 1.25))},
      layers: [
        {type: 'line', label: 'records/s', color: color.rps, points: samples.map(function (p) { return [x(p.t), p.gap ? null : p.rps]; })},
        {type: 'step', axis: 'y2', label: 'workers running', color: color.workers, width: 1.5,
          points: samples.map(function (p) { return [x(p.t), p.workers_running]; })},
        {type: 'vmarks', marks: marks}]});
  }

  // endColor is an ended segment's mark: red lost, blue let go, else grey.
  function endColor(s) {
    if (s.lost || LOST[s.cause]) return color.lost;
    return s.cause === 'let-go' ? color.letgo : color.other;
  }

  function segTitle(name, s, what) {
    return name + ' #' + s.id + ' ' + what + (s.launch_cause ? ' (' + s.launch_cause + ')' : '');
  }

  function lane(slot, t0, end) {
    var name = slot.role + '/' + slot.slot, x = function (t) { return (ms(t) - t0) / 1000; };
    var ln = {key: name, segs: [], marks: []};
    slot.segments.forEach(function (s) {
      var stop = s.ended ? x(s.ended) : end;
      var run = s.running ? x(s.running) : null;
      ln.segs.push({from: x(s.launched), to: run === null ? stop : run, state: 'pending', color: color.pending,
        title: segTitle(name, s, 'pending')});
      if (run !== null) ln.segs.push({from: run, to: stop, state: 'running', color: color.running,
        title: segTitle(name, s, 'running since ' + clock(s.running))});
      if (s.ended) ln.marks.push({x: stop, color: endColor(s), title: segTitle(name, s, 'ended: ' + text(s.cause)) +
        (s.reason ? ' — ' + s.reason : '') + (s.exit_code ? ' (exit ' + s.exit_code + ')' : '')});
    });
    ln.marks = ln.marks.concat(slowMarks(name, slot, x));
    var last = slot.segments[slot.segments.length - 1] || {};
    ln.attrs = {'data-state': last.ended ? 'ended' : last.running ? 'running' : 'pending',
      'data-id': last.id, 'data-cause': text(last.cause)};
    return ln;
  }

  // slowMarks are a worker lane's marks where its worker was marked slow
  // (amber) or no longer (teal): the summary's slow_workers.
  function slowMarks(name, slot, x) {
    var ids = {}, marks = (doc.summary || {}).slow_workers || [];
    if (slot.role !== 'worker') return [];
    slot.segments.forEach(function (s) { ids[s.id] = true; });
    return marks.filter(function (m) { return ids[m.worker] && ms(m.at) !== null; }).map(function (m) {
      return {x: x(m.at), color: m.slow ? color.slow : color.recovered, cls: m.slow ? 'slow' : 'recovered',
        title: name + ' #' + m.worker + (m.slow ? ' marked slow: ' : ' no longer slow: ') + C.num(m.records_per_second) +
          " records/s, the others' median " + C.num(m.median_others)};
    });
  }

  // slowRow is the summary's line of slow workers: those marked now, the
  // marks so far, the parks (AllReduce); null when there were none.
  function slowRow(s) {
    var marks = s.slow_workers || [], parked = (s.workers || {}).parked || 0, now = {};
    if (!marks.length && !parked) return null;
    marks.forEach(function (m) { now[m.worker] = m.slow; });
    var slow = Object.keys(now).filter(function (id) { return now[id]; }).map(function (id) { return '#' + id; });
    return ['slow workers', (slow.length ? slow.join(', ') + ' now' : 'none now') + ' · ' + marks.length + ' mark' +
      (marks.length === 1 ? '' : 's') + ' · ' + parked + ' parked'];
  }

  function timeline(t0, end) {
    var slots = (doc.timeline || {}).slots || [];
    C.lanes($('timeline'), {x: {time: true, min: 0, max: Math.max(end, 1)},
      lanes: slots.map(function (s) { return lane(s, t0, end); })});
  }

  function eventItem(e) {
    var li = document.createElement('li');
    li.dataset.kind = text(e.kind);
    li.dataset.cause = text(e.cause);
    li.dataset.seq = text(e.seq);
    if (e.warning) li.className = 'warning';
    var who = e.role ? e.role + '/' + e.slot + ' #' + e.id : '';
    var add = function (cls, v) {
      if (!v) return;
      var sp = document.createElement('span');
      sp.className = cls;
      sp.textContent = v;
      li.appendChild(sp);
    };
    add('time', clock(e.at));
    add('kind', e.kind);
    add('who', who);
    add('cause', e.cause);
    add('text', [e.reason, e.detail].filter(Boolean).join(' — '));
    return li;
  }

  function events() {
    var list = (doc.events || {}).events || [], ul = $('events');
    ul.textContent = '';
    for (var i = list.length - 1; i >= 0 && i >= list.length - 300; i--) ul.appendChild(eventItem(list[i]));
  }

  function summary() {
    var s = doc.summary, box = $('summary');
    if (!s) return;
    var w = s.workers || {}, ps = s.ps || {}, t = s.tasks || {}, ev = s.eval || {};
    var rows = [['status', s.status], ['duration', C.duration(s.duration_seconds)],
      ['records/s', C.num(s.records_per_second)], ['model version', s.model_version],
      ['workers', w.launched + ' launched, ' + w.lost + ' lost, ' + w.relaunched + ' relaunched, ' + w.preempted + ' preempted'],
      ['PS', ps.launched + ' launched, ' + ps.lost + ' lost'], ['tasks', t.completed + ' done, ' + t.failed + ' failed, ' + t.requeued + ' requeued'],
      ['master restarts', s.master_restarts]];
    var slow = slowRow(s);
    if (slow) rows.push(slow);
    if (s.eval) rows.push(['eval', 'accuracy ' + C.num(ev.accuracy) + ', loss ' + C.num(ev.loss)]);
    if (s.error) rows.push(['error', s.error]);
    box.dataset.status = text(s.status);
    $('summary-title').textContent = s.status === 'running' ? 'Summary so far' : 'Summary';
    var dl = box.querySelector('dl');
    dl.textContent = '';
    rows.forEach(function (r) {
      var dt = document.createElement('dt'), dd = document.createElement('dd');
      dt.textContent = r[0];
      dd.textContent = text(r[1]);
      dl.appendChild(dt);
      dl.appendChild(dd);
    });
  }

  function render() {
    if (!doc) return;
    document.body.dataset.seq = text(doc.seq);
    var t0 = origin(), end = (now() - t0) / 1000;
    header();
    epochs();
    lossChart();
    rpsChart(t0, end);
    timeline(t0, end);
    events();
    summary();
  }

  function gotJob() {
    got = Date.now();
    var j = doc.job || {};
    if (j.started_at) skew = ms(j.started_at) + j.elapsed_seconds * 1000 - got;
  }

  // A delta's fields replace the document's, except the new events and
  // samples, which are appended to its lists.
  function merge(d) {
    for (var k in d) {
      if (!Object.prototype.hasOwnProperty.call(d, k)) continue;
      if (k === 'events' && doc.events) doc.events.events = Live.append(doc.events.events, d.events, 1000);
      else if (k === 'samples' && doc.series) doc.series.samples = Live.append(doc.series.samples, d.samples, 2000);
      else doc[k] = d[k];
    }
  }

  Live.follow({
    snapshot: function (d) { doc = d; gotJob(); render(); },
    delta: function (d) { if (!doc) return; merge(d); gotJob(); render(); },
    ended: function (d) { ended = true; doc = d; gotJob(); render(); },
    status: function (state, s) {
      $('status').textContent = state === 'ended' ? 'job ended; master gone' : s;
      $('status').dataset.state = state;
      $('banner').hidden = state !== 'ended';
    }
  });
  setInterval(tick, 1000);
  window.addEventListener('resize', render);
})();
