// The cluster's page, served by the autoscaler: its documents
// (docs/dashboard.md, "The cluster's dashboard") drawn with Charts
// (chart.js). Test hooks (markup, not API): svg[data-series=cpu][data-n],
// its bands' path[data-key][data-last] (key: services or ns/job), #jobs
// tr[data-job], #decisions li[data-reason], document.body.dataset.seq.
(function () {
  'use strict';
  var C = Charts;
  var doc = null; // {cluster, series, decisions}, deltas merged in
  var $ = function (id) { return document.getElementById(id); };
  var SERVICES = '#9ca3af', CAPACITY = '#111827';

  var text = C.text, ms = C.ms, clock = C.clock, cell = C.cell;

  // jobNames are every job in the series and now, in order: each keeps
  // its colour while the page lives.
  function jobNames() {
    var seen = {};
    ((doc.series || {}).samples || []).forEach(function (s) { for (var k in s.jobs || {}) seen[k] = 1; });
    ((doc.cluster || {}).jobs || []).forEach(function (j) { seen[j.job] = 1; });
    return Object.keys(seen).sort();
  }

  function colorOf(names, name) { return C.palette[names.indexOf(name) % C.palette.length]; }

  function header() {
    var c = doc.cluster || {}, training = 0;
    (c.jobs || []).forEach(function (j) { training += j.cpu || 0; });
    $('capacity').textContent = C.num(c.capacity_cpu);
    $('services').textContent = C.num(c.services_cpu);
    $('training').textContent = C.num(training);
    $('pending').textContent = text(c.pending_service_pods);
    $('at').textContent = c.at ? 'at ' + clock(c.at) : '';
  }

  // band is a stacked band whose paths say what they draw: data-key (the
  // services, or a job) and data-last (its latest value).
  function band(key, color, values) {
    return {label: key, color: color, values: values,
      attrs: {'data-key': key, 'data-last': values.length ? text(values[values.length - 1]) : ''}};
  }

  // chart: x is seconds before the latest sample.
  function chart(names) {
    var samples = (doc.series || {}).samples || [];
    var last = samples.length ? ms(samples[samples.length - 1].t) : 0;
    var xs = samples.map(function (s) { return (ms(s.t) - last) / 1000; });
    var bands = [band('services', SERVICES, samples.map(function (s) { return s.services_cpu; }))];
    names.forEach(function (n) {
      bands.push(band(n, colorOf(names, n), samples.map(function (s) {
        return s.jobs && s.jobs[n] ? s.jobs[n].cpu : 0;
      })));
    });
    C.plot($('cpu'), {x: {time: true, max: 0, format: function (v) { return v === 0 ? 'now' : '−' + C.duration(-v); }},
      y: {label: 'CPU', zero: true, pad: 0.05},
      layers: [
        {type: 'stack', xs: xs, bands: bands, gaps: samples.map(function (s) { return !!s.gap; })},
        {type: 'step', label: 'capacity', color: CAPACITY, width: 2,
          points: samples.map(function (s, i) { return [xs[i], s.capacity_cpu]; })}]});
  }

  function jobs(names) {
    var tb = $('jobs').tBodies[0];
    tb.textContent = '';
    ((doc.cluster || {}).jobs || []).forEach(function (j) {
      var tr = document.createElement('tr');
      tr.dataset.job = j.job;
      var name = cell(tr, '');
      var key = document.createElement('span');
      key.className = 'key';
      key.style.background = colorOf(names, j.job);
      key.style.marginLeft = '0';
      name.appendChild(key);
      name.appendChild(document.createTextNode(j.job));
      cell(tr, j.min + '–' + j.max);
      cell(tr, j.target);
      cell(tr, j.placed);
      cell(tr, j.running);
      cell(tr, j.pending, j.pending > 0 ? 'bad' : '');
      cell(tr, C.num(j.cpu));
      cell(tr, text(j.reason));
      tb.appendChild(tr);
    });
  }

  function decisions() {
    var list = (doc.decisions || {}).decisions || [], ul = $('decisions');
    ul.textContent = '';
    for (var i = list.length - 1; i >= 0; i--) {
      var d = list[i], li = document.createElement('li');
      li.dataset.reason = text(d.reason);
      li.dataset.job = text(d.job);
      li.title = text(d.job) + ': ' + text(d.from) + ' → ' + text(d.to) + ', ' + text(d.reason);
      [['time', clock(d.at)], ['kind', d.job], ['', d.from + ' → ' + d.to], ['cause', d.reason]].forEach(function (p) {
        var sp = document.createElement('span');
        sp.className = p[0];
        sp.textContent = text(p[1]);
        li.appendChild(sp);
      });
      ul.appendChild(li);
    }
  }

  function render() {
    if (!doc) return;
    document.body.dataset.seq = text(doc.seq);
    var names = jobNames();
    header();
    chart(names);
    jobs(names);
    decisions();
  }

  // A delta brings the cluster now, and the new samples and decisions;
  // after the autoscaler thinned its series, the whole series instead.
  function merge(d) {
    doc.seq = d.seq;
    if (d.cluster) doc.cluster = d.cluster;
    if (d.series) doc.series = d.series;
    doc.series = doc.series || {samples: []};
    doc.series.samples = Live.append(doc.series.samples, d.samples, 720);
    doc.decisions = doc.decisions || {decisions: []};
    doc.decisions.decisions = Live.append(doc.decisions.decisions, d.decisions, 200);
  }

  Live.follow({
    snapshot: function (d) { doc = d; render(); },
    delta: function (d) { if (!doc) return; merge(d); render(); },
    ended: function (d) { doc = d; render(); },
    status: function (state, s) {
      $('status').textContent = state === 'ended' ? 'autoscaler gone' : s;
      $('status').dataset.state = state;
      $('banner').hidden = state !== 'ended';
    }
  });
  window.addEventListener('resize', render);
})();
