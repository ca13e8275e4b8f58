// Placeholder page: shows the job's phase, its events and the stream's
// document as text. The charts come later (docs/design-dashboard.md, step
// 4). URLs are relative so that the page works behind a proxy's path
// prefix.
(function () {
  'use strict';
  var doc = null;
  var pre = document.getElementById('doc');
  var status = document.getElementById('status');
  var phase = document.getElementById('phase');
  var events = document.getElementById('events');

  function text(v) {
    return v === undefined || v === null ? '' : String(v);
  }

  // One line per event, newest first; warnings marked.
  function eventItem(e) {
    var li = document.createElement('li');
    li.dataset.kind = text(e.kind);
    li.dataset.cause = text(e.cause);
    if (e.warning) li.className = 'warning';
    var who = e.role ? e.role + '/' + e.slot + ' (id ' + e.id + ')' : '';
    li.textContent = [text(e.at).replace('T', ' ').replace(/\..*$/, ''), e.kind, who,
      text(e.cause), text(e.reason), text(e.detail)].filter(Boolean).join('  ');
    return li;
  }

  function showJob() {
    var job = doc && doc.job;
    if (!job || typeof job !== 'object') return;
    var w = job.workers || {};
    phase.textContent = text(job.job) + ': ' + text(job.phase) +
      ' — workers ' + text(w.running) + ' running, ' + text(w.pending) + ' pending (target ' + text(w.target) + ')';
    phase.dataset.phase = text(job.phase);
  }

  function showEvents() {
    var list = doc && doc.events && doc.events.events;
    if (!Array.isArray(list)) return;
    events.textContent = '';
    for (var i = list.length - 1; i >= 0 && i >= list.length - 200; i--) {
      events.appendChild(eventItem(list[i]));
    }
  }

  function show(s) {
    status.textContent = s;
    document.body.dataset.seq = doc ? doc.seq : '';
    showJob();
    showEvents();
    pre.textContent = JSON.stringify(doc, null, 2);
  }

  // A delta's fields replace the document's, except the new events and
  // samples, which are appended to its lists.
  function merge(d) {
    doc = doc || {};
    for (var k in d) {
      if (!Object.prototype.hasOwnProperty.call(d, k)) continue;
      if (k === 'events' && Array.isArray(d.events) && doc.events && Array.isArray(doc.events.events)) {
        doc.events.events = doc.events.events.concat(d.events).slice(-1000);
      } else if (k === 'samples' && Array.isArray(d.samples) && doc.series && Array.isArray(doc.series.samples)) {
        doc.series.samples = doc.series.samples.concat(d.samples);
      } else {
        doc[k] = d[k];
      }
    }
    if (d.seq !== undefined) doc.seq = d.seq;
  }

  function connect() {
    var es = new EventSource('api/stream');
    es.addEventListener('snapshot', function (e) {
      doc = JSON.parse(e.data);
      show('live');
    });
    es.addEventListener('delta', function (e) {
      merge(JSON.parse(e.data));
      show('live');
    });
    es.addEventListener('ended', function (e) {
      doc = JSON.parse(e.data);
      es.close();
      show('job ended; master gone');
    });
    es.onerror = function () {
      // The browser retries by itself unless the answer was not a stream
      // (503 when full): then try again later.
      if (es.readyState === EventSource.CLOSED) {
        show('disconnected; retrying');
        setTimeout(connect, 5000);
      } else {
        show('reconnecting…');
      }
    };
  }
  connect();
})();
