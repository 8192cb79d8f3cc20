// Fila dashboard: asks before a redrive, refreshes the live parts of a
// page from its JSON endpoint, and draws the fairness charts as SVG.
(function () {
  'use strict';

  // Redrive asks first. The server moves nothing without confirm=yes
  // either: without this script it answers with a page that asks.
  document.querySelectorAll('form[data-confirm]').forEach(function (form) {
    form.addEventListener('submit', function (ev) {
      var msg = form.getAttribute('data-confirm').replace('{count}', form.elements.count.value);
      if (!window.confirm(msg)) {
        ev.preventDefault();
        return;
      }
      form.elements.confirm.value = 'yes';
    });
  });

  var page = document.querySelector('[data-live]');
  if (!page) {
    return;
  }
  var url = page.getAttribute('data-live');
  var every = Math.max(500, parseInt(page.getAttribute('data-every'), 10) || 2000);
  var status = document.getElementById('live-status');

  function tick() {
    fetch(url, {headers: {'Accept': 'application/json'}, cache: 'no-store', credentials: 'same-origin'})
      .then(function (r) {
        if (!r.ok) {
          throw new Error('HTTP ' + r.status);
        }
        return r.json();
      })
      .then(function (d) {
        Object.keys(d.parts || {}).forEach(function (k) {
          var part = document.getElementById('live-' + k);
          // Rendered, and escaped, by the server's templates.
          if (part) {
            part.innerHTML = d.parts[k];
          }
        });
        if (d.chart) {
          draw(d.chart);
        }
        status.textContent = 'Updated ' + new Date().toLocaleTimeString() + '.';
        status.className = '';
      })
      .catch(function (e) {
        status.textContent = 'Update failed (' + e.message + '); retrying.';
        status.className = 'warn';
      })
      .then(function () {
        setTimeout(tick, every);
      });
  }
  tick();

  var SVG = 'http://www.w3.org/2000/svg';
  var COLORS = ['#2563eb', '#dc2626', '#059669', '#d97706', '#7c3aed', '#0891b2', '#db2777', '#4b5563'];
  var W = 720;
  var M = {l: 40, r: 12, t: 10, b: 24};

  function svgEl(name, attrs, parent) {
    var e = document.createElementNS(SVG, name);
    Object.keys(attrs).forEach(function (k) {
      e.setAttribute(k, attrs[k]);
    });
    if (parent) {
      parent.appendChild(e);
    }
    return e;
  }

  // plot draws series (values from 0 to 1, null for none) against t
  // (seconds before the latest sample) into box, replacing what it held.
  function plot(box, height, t, series, from) {
    var svg = svgEl('svg', {viewBox: '0 0 ' + W + ' ' + height, width: '100%', role: 'img', 'class': 'plot'});
    var iw = W - M.l - M.r;
    var ih = height - M.t - M.b;
    var x = function (s) { return M.l + (s - from) / (0 - from) * iw; };
    var y = function (v) { return M.t + (1 - v) * ih; };
    [0, 0.25, 0.5, 0.75, 1].forEach(function (v) {
      svgEl('line', {x1: M.l, x2: W - M.r, y1: y(v), y2: y(v), 'class': v === 0 ? 'axis' : 'grid'}, svg);
      svgEl('text', {x: M.l - 6, y: y(v) + 4, 'text-anchor': 'end', 'class': 'tick'}, svg).textContent = v === 0 ? '0' : v.toFixed(2).replace(/0$/, '');
    });
    var step = niceStep(-from);
    for (var s = 0; s >= from; s -= step) {
      svgEl('line', {x1: x(s), x2: x(s), y1: M.t + ih, y2: M.t + ih + 4, 'class': 'axis'}, svg);
      svgEl('text', {x: x(s), y: height - 6, 'text-anchor': s === 0 ? 'end' : 'middle', 'class': 'tick'}, svg).textContent = s === 0 ? 'now' : fmtAgo(-s);
    }
    series.forEach(function (se) {
      var d = '';
      var pen = false;
      se.values.forEach(function (v, i) {
        if (v === null || v === undefined) {
          pen = false;
          return;
        }
        d += (pen ? 'L' : 'M') + x(t[i]).toFixed(1) + ' ' + y(Math.max(0, Math.min(1, v))).toFixed(1);
        pen = true;
      });
      if (d) {
        var p = svgEl('path', {d: d, fill: 'none', stroke: se.color, 'stroke-width': se.width || 2, 'class': se.cls}, svg);
        if (se.dash) {
          p.setAttribute('stroke-dasharray', se.dash);
        }
        if (se.key !== undefined) {
          p.setAttribute('data-key', se.key);
        }
      }
    });
    box.replaceChildren(svg);
  }

  function niceStep(span) {
    var steps = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600];
    for (var i = 0; i < steps.length; i++) {
      if (span / steps[i] <= 6) {
        return steps[i];
      }
    }
    return 7200;
  }

  function fmtAgo(s) {
    return s >= 60 && s % 60 === 0 ? '−' + s / 60 + 'm' : '−' + s + 's';
  }

  function pct(v) {
    return v === null || v === undefined ? '-' : (100 * v).toFixed(1) + '%';
  }

  function last(a) {
    for (var i = a.length - 1; i >= 0; i--) {
      if (a[i] !== null) {
        return a[i];
      }
    }
    return null;
  }

  function draw(c) {
    var jain = document.getElementById('chart-jain');
    var share = document.getElementById('chart-share');
    var legend = document.getElementById('chart-legend');
    if (!jain || !share || c.empty || !c.t || c.t.length === 0) {
      return;
    }
    // At least a minute wide, so that the first samples do not stretch.
    var from = Math.min(c.t[0], -60);
    plot(jain, 150, c.t, [{values: c.jain, color: '#111827', width: 2.5, cls: 'jain'}], from);
    var series = [];
    legend.replaceChildren();
    (c.keys || []).forEach(function (k, i) {
      var color = COLORS[i % COLORS.length];
      series.push({values: k.entitled, color: color, width: 1.5, dash: '5 4', cls: 'entitled', key: k.key});
      series.push({values: k.share, color: color, width: 2.5, cls: 'share', key: k.key});
      var li = document.createElement('li');
      li.setAttribute('data-key', k.key);
      var sw = svgEl('svg', {width: 14, height: 14, viewBox: '0 0 14 14', 'class': 'swatch'}, li);
      svgEl('rect', {x: 1, y: 1, width: 12, height: 12, rx: 3, fill: color}, sw);
      var name = document.createElement('b');
      name.textContent = k.key;
      li.appendChild(name);
      li.appendChild(document.createTextNode(' delivered ' + pct(last(k.share)) + ' · entitled ' + pct(last(k.entitled))));
      legend.appendChild(li);
    });
    plot(share, 220, c.t, series, from);
  }
}());
