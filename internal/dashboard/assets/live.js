// Follows a dashboard's stream (api/stream, relative so that it works
// behind a proxy's prefix) for both pages: a snapshot replaces the page's
// document, a delta is merged into it, ended is final. The status line
// says whether the page is live.
var Live = (function () {
  'use strict';

  // follow calls on.snapshot(doc), on.delta(doc), on.ended(doc) and
  // on.status(state, text): state live, reconnecting or ended; text a
  // line for the status (the page says what ended means).
  function follow(on) {
    var ended = false;
    function connect() {
      var es = new EventSource('api/stream');
      es.addEventListener('snapshot', function (e) { on.snapshot(JSON.parse(e.data)); on.status('live', 'live'); });
      es.addEventListener('delta', function (e) { on.delta(JSON.parse(e.data)); on.status('live', 'live'); });
      es.addEventListener('ended', function (e) {
        ended = true;
        es.close();
        on.ended(JSON.parse(e.data));
        on.status('ended', 'ended');
      });
      es.onerror = function () {
        if (ended) return;
        // The browser retries by itself unless the answer was not a
        // stream (503 when full): then try again later.
        if (es.readyState === EventSource.CLOSED) {
          on.status('reconnecting', 'disconnected; retrying in 5 s');
          setTimeout(connect, 5000);
        } else {
          on.status('reconnecting', 'reconnecting…');
        }
      };
    }
    connect();
  }

  // append returns list with more appended, keeping the last max.
  function append(list, more, max) {
    var out = (list || []).concat(more || []);
    return out.length > max ? out.slice(out.length - max) : out;
  }

  return {follow: follow, append: append};
})();
