// Hand-written SVG charts, shared by the job's page and the cluster's
// (docs/design-dashboard.md, decision 5): axes with round ticks, lines and
// step lines that break at null values, point markers, labelled vertical
// markers, a second y axis, stacked areas, and timeline lanes. Elements
// are DOM nodes, so tests count them. No library.
var Charts = (function () {
  'use strict';
  var NS = 'http://www.w3.org/2000/svg';
  var palette = ['#2563eb', '#ea580c', '#7c3aed', '#0d9488', '#db2777', '#ca8a04', '#4b5563', '#65a30d'];

  // el makes an SVG element with attributes, appended to parent if given.
  function el(tag, attrs, parent) {
    var n = document.createElementNS(NS, tag);
    for (var k in attrs) if (attrs[k] !== undefined && attrs[k] !== null) n.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(n);
    return n;
  }

  // tip adds a hover text (an SVG <title>) to node.
  function tip(node, text) {
    if (text) el('title', {}, node).textContent = text;
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
  }

  // niceStep is a round step (1, 2, 2.5 or 5 times a power of ten; for
  // time, a round number of seconds, minutes or hours) giving about n
  // steps over span.
  function niceStep(span, n, time) {
    var raw = span / Math.max(1, n);
    if (time && raw >= 1) {
      var steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
      for (var i = 0; i < steps.length; i++) if (steps[i] >= raw) return steps[i];
    }
    var mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var ms = [1, 2, 2.5, 5, 10];
    for (var j = 0; j < ms.length; j++) if (ms[j] * mag >= raw) return ms[j] * mag;
    return 10 * mag;
  }

  // niceTicks covers [lo, hi] with about n round ticks: {lo, hi, ticks}.
  function niceTicks(lo, hi, n, time) {
    if (!isFinite(lo) || !isFinite(hi)) { lo = 0; hi = 1; }
    if (hi <= lo) hi = lo + (lo === 0 ? 1 : Math.abs(lo) * 0.1);
    var step = niceStep(hi - lo, n, time);
    var a = Math.floor(lo / step + 1e-9) * step, b = Math.ceil(hi / step - 1e-9) * step;
    var ticks = [];
    for (var v = a; v <= b + step * 1e-6; v += step) ticks.push(Math.round(v / step) * step);
    return {lo: a, hi: b, step: step, ticks: ticks};
  }

  // num formats a number shortly: 1234 → 1.23k, 0.0123 → 0.0123.
  function num(v) {
    if (v === null || v === undefined || !isFinite(v)) return '–';
    var a = Math.abs(v);
    if (a >= 1e6) return +(v / 1e6).toPrecision(3) + 'M';
    if (a >= 1e4) return +(v / 1e3).toPrecision(3) + 'k';
    if (a >= 100 || a === 0) return String(Math.round(v));
    return String(+v.toPrecision(3));
  }

  // duration formats seconds: 42s, 3m05s, 1h02m.
  function duration(s) {
    if (s === null || s === undefined || !isFinite(s)) return '–';
    s = Math.max(0, Math.round(s));
    var h = Math.floor(s / 3600), m = Math.floor(s % 3600 / 60), r = s % 60;
    var pad = function (x) { return (x < 10 ? '0' : '') + x; };
    if (h) return h + 'h' + pad(m) + 'm';
    if (m) return m + 'm' + (r ? pad(r) + 's' : '');
    return r + 's';
  }

  // extent is [min, max] of the finite values of f over the layers on axis.
  function extent(layers, axis, f) {
    var lo = Infinity, hi = -Infinity;
    layers.forEach(function (l) {
      if ((l.axis || 'y') !== axis && f !== 'x') return;
      values(l, f).forEach(function (v) {
        if (v !== null && isFinite(v)) { lo = Math.min(lo, v); hi = Math.max(hi, v); }
      });
    });
    return [lo, hi];
  }

  function values(l, f) {
    if (l.type === 'stack') {
      if (f === 'x') return l.xs;
      var top = l.xs.map(function () { return 0; });
      l.bands.forEach(function (b) { b.values.forEach(function (v, i) { top[i] += v || 0; }); });
      return top;
    }
    if (l.type === 'vmarks') return f === 'x' ? l.marks.map(function (m) { return m.x; }) : [];
    return (l.points || []).map(function (p) { return f === 'x' ? p[0] : p[1]; });
  }

  // scale builds an axis's ticks and its mapping onto [a, b] pixels.
  function scale(opt, ext, a, b, n) {
    opt = opt || {};
    var lo = opt.min !== undefined ? opt.min : ext[0], hi = opt.max !== undefined ? opt.max : ext[1];
    if (opt.zero && lo > 0) lo = 0;
    if (opt.pad && isFinite(hi) && isFinite(lo)) hi += (hi - lo) * opt.pad; // headroom above the data
    var t = niceTicks(lo, hi, n, opt.time);
    if (opt.min !== undefined) t.lo = opt.min;
    if (opt.max !== undefined) t.hi = opt.max;
    t.ticks = t.ticks.filter(function (v) { return v >= t.lo - 1e-9 && v <= t.hi + 1e-9; });
    t.map = function (v) { return a + (v - t.lo) / (t.hi - t.lo || 1) * (b - a); };
    t.fmt = opt.format || (opt.time ? duration : num);
    return t;
  }

  // size reads the SVG's laid-out size and sets its viewBox to it.
  function size(svg) {
    var r = svg.getBoundingClientRect();
    var w = Math.max(200, Math.round(r.width)), h = Math.max(80, Math.round(r.height));
    svg.setAttribute('viewBox', '0 0 ' + w + ' ' + h);
    return {w: w, h: h};
  }

  // path draws points [[x, y], …] as a line (or a step line), broken at
  // null ys; it returns how many points it drew.
  function path(g, pts, sx, sy, attrs, step) {
    var d = '', n = 0, pen = false;
    pts.forEach(function (p) {
      if (p[1] === null || p[1] === undefined || !isFinite(p[1])) { pen = false; return; }
      var x = sx.map(p[0]).toFixed(1), y = sy.map(p[1]).toFixed(1);
      if (!pen) d += 'M' + x + ' ' + y;
      else d += step ? 'H' + x + 'V' + y : 'L' + x + ' ' + y;
      pen = true; n++;
    });
    if (d) el('path', Object.assign({d: d, fill: 'none'}, attrs), g);
    return n;
  }

  function axes(g, box, sx, sy, sy2, spec) {
    var grid = el('g', {'class': 'grid'}, g);
    sy.ticks.forEach(function (v) {
      var y = sy.map(v).toFixed(1);
      el('line', {x1: box.l, x2: box.r, y1: y, y2: y}, grid);
      el('text', {x: box.l - 4, y: y, 'text-anchor': 'end', dy: '0.32em'}, g).textContent = sy.fmt(v);
    });
    if (sy2) sy2.ticks.forEach(function (v) {
      el('text', {x: box.r + 4, y: sy2.map(v).toFixed(1), dy: '0.32em'}, g).textContent = sy2.fmt(v);
    });
    sx.ticks.forEach(function (v) {
      var x = sx.map(v).toFixed(1);
      el('line', {x1: x, x2: x, y1: box.b, y2: box.b + 4}, grid);
      el('text', {x: x, y: box.b + 15, 'text-anchor': 'middle'}, g).textContent = sx.fmt(v);
    });
    el('line', {x1: box.l, x2: box.r, y1: box.b, y2: box.b, 'class': 'axis'}, g);
    // Axis labels run up the chart's outer edges.
    var mid = (box.t + box.b) / 2;
    if (spec.y && spec.y.label) el('text', {transform: 'translate(9 ' + mid + ') rotate(-90)', 'text-anchor': 'middle',
      'class': 'label'}, g).textContent = spec.y.label;
    if (spec.y2 && spec.y2.label) el('text', {transform: 'translate(' + (box.r + 38) + ' ' + mid + ') rotate(90)',
      'text-anchor': 'middle', 'class': 'label'}, g).textContent = spec.y2.label;
  }

  function legend(g, box, layers) {
    var x = box.l + 6;
    layers.forEach(function (l) {
      (l.type === 'stack' ? l.bands : [l]).forEach(function (it) {
        if (!it.label) return;
        el('rect', {x: x, y: 3, width: 10, height: 10, fill: it.color}, g);
        var t = el('text', {x: x + 14, y: 12}, g);
        t.textContent = it.label;
        x += 22 + 6.2 * it.label.length;
      });
    });
  }

  function marker(g, x, y, shape, color, text) {
    var m = shape === 'diamond'
      ? el('path', {d: 'M' + x + ' ' + (y - 5) + 'l5 5l-5 5l-5 -5z', fill: color}, g)
      : el('circle', {cx: x, cy: y, r: 3.5, fill: color}, g);
    tip(m, text);
  }

  // layer draws one layer; it returns the number of points it drew.
  function layer(g, l, sx, sy, box) {
    var color = l.color || palette[0];
    if (l.type === 'line' || l.type === 'step') {
      var n = path(g, l.points, sx, sy, {stroke: color, 'stroke-width': l.width || 1.8}, l.type === 'step');
      if (l.dots) l.points.forEach(function (p) {
        if (p[1] !== null && isFinite(p[1])) el('circle', {cx: sx.map(p[0]).toFixed(1), cy: sy.map(p[1]).toFixed(1), r: 1.8, fill: color}, g);
      });
      return n;
    }
    if (l.type === 'markers') {
      l.points.forEach(function (p) { marker(g, sx.map(p[0]).toFixed(1), sy.map(p[1]).toFixed(1), l.shape, color, p[2]); });
      return l.points.length;
    }
    if (l.type === 'stack') return stack(g, l, sx, sy);
    l.marks.forEach(function (m) {
      var x = sx.map(m.x).toFixed(1), mg = el('g', {'class': 'vmark'}, g);
      el('line', {x1: x, x2: x, y1: box.t, y2: box.b, stroke: m.color || color, 'stroke-dasharray': '3 2'}, mg);
      if (m.label) el('text', {x: +x + 3, y: box.t + 10, fill: m.color || color}, mg).textContent = m.label;
      tip(mg, m.title || m.label);
    });
    return l.marks.length;
  }

  // stack draws bands on top of each other; a null value breaks them all.
  // Each band's paths (one per unbroken run) carry its attrs.
  function stack(g, l, sx, sy) {
    var base = l.xs.map(function () { return 0; });
    l.bands.forEach(function (b) {
      var top = base.map(function (v, i) { return b.values[i] === null || b.values[i] === undefined ? null : v + b.values[i]; });
      var runs = [], run = [];
      l.xs.forEach(function (x, i) {
        if (top[i] === null || l.gaps && l.gaps[i]) { if (run.length) runs.push(run); run = []; if (top[i] === null) return; }
        run.push(i);
      });
      if (run.length) runs.push(run);
      runs.forEach(function (r) {
        var up = r.map(function (i) { return sx.map(l.xs[i]).toFixed(1) + ' ' + sy.map(top[i]).toFixed(1); });
        var down = r.slice().reverse().map(function (i) { return sx.map(l.xs[i]).toFixed(1) + ' ' + sy.map(base[i]).toFixed(1); });
        tip(el('path', Object.assign({d: 'M' + up.join('L') + 'L' + down.join('L') + 'Z', fill: b.color, 'fill-opacity': 0.85}, b.attrs || {}), g), b.label);
      });
      base = top.map(function (v, i) { return v === null ? base[i] : v; });
    });
    return l.xs.length;
  }

  // plot draws spec into svg: {x, y, y2: {min, max, zero, pad, time,
  // label, format}, layers: [{type: line|step|markers|stack|vmarks, axis: y|y2,
  // points: [[x, y, title]], color, label, dots; a stack's xs, gaps and bands:
  // [{label, color, values, attrs}]}], legend}. It returns the
  // number of points each layer drew, and sets data-n to the first's.
  function plot(svg, spec) {
    clear(svg);
    var sz = size(svg), layers = spec.layers || [];
    var box = {l: 52, r: sz.w - (spec.y2 ? 46 : 12), t: 20, b: sz.h - 22};
    var sx = scale(spec.x, extent(layers, 'y', 'x'), box.l, box.r, Math.max(2, (box.r - box.l) / 90));
    var ny = Math.max(2, (box.b - box.t) / 40);
    var sy = scale(spec.y, extent(layers, 'y', 'y'), box.b, box.t, ny);
    var sy2 = spec.y2 ? scale(spec.y2, extent(layers, 'y2', 'y'), box.b, box.t, ny) : null;
    var g = el('g', {'class': 'chart'}, svg);
    axes(g, box, sx, sy, sy2, spec);
    var clip = 'clip-' + (svg.id || Math.random().toString(36).slice(2));
    el('rect', {x: box.l, y: box.t - 2, width: box.r - box.l, height: box.b - box.t + 4}, el('clipPath', {id: clip}, g));
    var body = el('g', {'clip-path': 'url(#' + clip + ')'}, g);
    var counts = layers.map(function (l) { return layer(body, l, sx, l.axis === 'y2' ? sy2 : sy, box); });
    if (spec.legend !== false) legend(g, box, layers);
    svg.dataset.n = counts.length ? counts[0] : 0;
    return counts;
  }

  // lanes draws timeline lanes over spec.x: spec.lanes [{key, label,
  // attrs, segs: [{from, to, state, color, title}], marks: [{x, color, cls (class: end by default),
  // title}]}]. Each lane is a <g data-slot=key> with its attrs.
  function lanes(svg, spec) {
    clear(svg);
    var rows = spec.lanes || [], h = spec.laneHeight || 16;
    svg.style.height = (rows.length * (h + 4) + 26) + 'px';
    var sz = size(svg), box = {l: 66, r: sz.w - 12, t: 4, b: sz.h - 22};
    var sx = scale(spec.x, [0, 1], box.l, box.r, Math.max(2, (box.r - box.l) / 90));
    var g = el('g', {'class': 'chart'}, svg);
    axes(g, box, sx, {ticks: []}, null, {});
    rows.forEach(function (ln, i) {
      var y = box.t + i * (h + 4);
      var lg = el('g', Object.assign({'data-slot': ln.key, 'class': 'lane'}, ln.attrs || {}), g);
      el('text', {x: box.l - 6, y: y + h / 2, 'text-anchor': 'end', dy: '0.32em'}, lg).textContent = ln.label || ln.key;
      ln.segs.forEach(function (s) {
        var x1 = sx.map(s.from), x2 = Math.max(x1 + 1, sx.map(s.to));
        tip(el('rect', {x: x1.toFixed(1), y: y, width: (x2 - x1).toFixed(1), height: h, fill: s.color, 'data-seg': s.state}, lg), s.title);
      });
      (ln.marks || []).forEach(function (m) {
        var x = sx.map(m.x);
        tip(el('rect', {x: (x - 2).toFixed(1), y: y - 2, width: 4, height: h + 4, fill: m.color, 'class': m.cls || 'end'}, lg), m.title);
      });
    });
    return rows.length;
  }

  // The pages' small helpers: a value as text ('' for none), an RFC 3339
  // time in ms (null if none), its clock time, a table cell.
  function text(v) { return v === undefined || v === null ? '' : String(v); }
  function ms(t) { var v = Date.parse(t); return isNaN(v) ? null : v; }
  function clock(t) { return text(t).replace(/^.*T/, '').replace(/\..*$|Z$|[+-]\d\d:\d\d$/, ''); }
  function cell(tr, v, cls) {
    var td = document.createElement('td');
    td.textContent = v;
    if (cls) td.className = cls;
    tr.appendChild(td);
    return td;
  }

  return {text: text, ms: ms, clock: clock, cell: cell, el: el, tip: tip, clear: clear,
    niceTicks: niceTicks, num: num, duration: duration,
    palette: palette, plot: plot, lanes: lanes};
})();
