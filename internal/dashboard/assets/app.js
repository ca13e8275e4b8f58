// Placeholder page: shows the job's document as the stream sends it. The
// charts come later (docs/design-dashboard.md, step 4). URLs are relative so
// that the page works behind a proxy's path prefix.
(function () {
  'use strict';
  var doc = null;
  var pre = document.getElementById('doc');
  var status = document.getElementById('status');

  function show(text) {
    status.textContent = text;
    document.body.dataset.seq = doc ? doc.seq : '';
    pre.textContent = JSON.stringify(doc, null, 2);
  }

  // A delta's top-level fields replace the document's (a shallow merge).
  function merge(d) {
    doc = doc || {};
    for (var k in d) {
      if (Object.prototype.hasOwnProperty.call(d, k)) doc[k] = d[k];
    }
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
