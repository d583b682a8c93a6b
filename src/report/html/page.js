// stallscope's HTML report: draws the embedded data (src/report/html_data.h) with uPlot.
// Every string from the job or a trace goes into the page as text (textContent), never as HTML.
(function () {
  'use strict';
  var data = JSON.parse(document.getElementById('stallscope-data').textContent);
  var app = document.getElementById('app');
  var charts = [];
  var PALETTE = ['#1f77b4', '#d62728', '#2ca02c', '#9467bd', '#ff7f0e', '#17becf', '#8c564b',
                 '#e377c2', '#7f7f7f', '#bcbd22'];
  var BAND_COLORS = {
    data_loading: 'rgba(214, 39, 40, 0.16)', forward_pass: 'rgba(44, 160, 44, 0.10)',
    backward_pass: 'rgba(44, 160, 44, 0.16)', optimizer_step: 'rgba(148, 103, 189, 0.14)',
    comm_wait: 'rgba(255, 127, 14, 0.18)', checkpointing: 'rgba(140, 86, 75, 0.25)',
    evaluation: 'rgba(23, 190, 207, 0.20)', sampling: 'rgba(23, 190, 207, 0.20)',
    logging: 'rgba(127, 127, 127, 0.2)'
  };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function section(title, note) {
    var s = el('section', 'block');
    s.appendChild(el('h2', null, title));
    if (note) s.appendChild(el('p', 'note', note));
    app.appendChild(s);
    return s;
  }
  function fmt(v, d) {
    if (v === null || v === undefined) return '-';
    return typeof v === 'number' ? v.toFixed(d === undefined ? 1 : d) : String(v);
  }
  function bytes(v) {
    if (v === null || v === undefined) return '-';
    var u = ['B', 'KB', 'MB', 'GB', 'TB'], i = 0;
    while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
    return v.toFixed(i ? 1 : 0) + ' ' + u[i];
  }
  function table(parent, head, rows) {
    var t = el('table', 'grid');
    var tr = el('tr');
    head.forEach(function (h) { tr.appendChild(el('th', null, h)); });
    t.appendChild(tr);
    rows.forEach(function (r) {
      var row = el('tr');
      r.forEach(function (c) { row.appendChild(el('td', typeof c === 'number' ? 'num' : null, c)); });
      t.appendChild(row);
    });
    parent.appendChild(t);
    return t;
  }
  function width() { return Math.max(320, Math.min(app.clientWidth || 1000, 1400) - 16); }

  // One uPlot chart; zoom (drag) and the cursor are shared by every time-axis chart.
  function chart(parent, title, xs, ys, opts) {
    var box = el('div', 'chart');
    parent.appendChild(box);
    var series = [{}];
    ys.forEach(function (y, i) {
      series.push(Object.assign({
        label: y.label, stroke: y.color || PALETTE[i % PALETTE.length], width: 1.25,
        spanGaps: true, points: { show: false }
      }, y.style || {}));
    });
    var o = {
      title: title, width: width(), height: opts.height || 220, series: series,
      scales: { x: { time: false } },
      axes: [{ label: opts.xlabel || 'seconds since start' }, { label: opts.ylabel || '' }],
      cursor: opts.sync ? { sync: { key: opts.sync, setSeries: false } } : {},
      legend: { live: true },
      hooks: opts.hooks || {}
    };
    if (opts.yrange) o.scales.y = { range: opts.yrange };
    var u = new uPlot(o, [xs].concat(ys.map(function (y) { return y.values; })), box);
    charts.push(u);
    return u;
  }

  // Joins series that have their own time stamps onto one x axis (nulls elsewhere).
  function join(list) {
    var tables = list.map(function (s) { return [s.t, s.v]; });
    return uPlot.join(tables);
  }

  // The stages of the run that every statistic leaves out (start-up, warm-up, tail): hatched
  // grey behind the lines, each named at its top when there is room.
  var STAGE_FILL = 'rgba(120, 120, 120, 0.13)';
  function drawStages(u, stages) {
    var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
    var x0 = u.scales.x.min, x1 = u.scales.x.max;
    stages.forEach(function (st) {
      if (st.stage === 'steady' || st.e < x0 || st.b > x1) return;
      var l = u.valToPos(Math.max(st.b, x0), 'x', true), r = u.valToPos(Math.min(st.e, x1), 'x', true);
      ctx.fillStyle = STAGE_FILL;
      ctx.fillRect(l, top, Math.max(1, r - l), h);
      if (r - l > 60) {
        ctx.fillStyle = '#666';
        ctx.font = '11px system-ui, sans-serif';
        ctx.fillText(st.stage, l + 4, top + 12);
      }
    });
  }

  // The phases as shaded bands behind the lines, drawn on the canvas under the series.
  function bandsPlugin(bands, stages) {
    return {
      hooks: {
        drawClear: [function (u) {
          var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
          var x0 = u.scales.x.min, x1 = u.scales.x.max;
          ctx.save();
          drawStages(u, stages);
          bands.forEach(function (b) {
            ctx.fillStyle = BAND_COLORS[b.phase] || 'rgba(0,0,0,0.08)';
            for (var i = 0; i < b.b.length; i++) {
              if (b.e[i] < x0 || b.b[i] > x1) continue;
              var l = u.valToPos(b.b[i], 'x', true), r = u.valToPos(b.e[i], 'x', true);
              ctx.fillRect(l, top, Math.max(1, r - l), h);
            }
          });
          ctx.restore();
        }]
      }
    };
  }

  function byPrefix(suffix) {
    return data.timeline.series.filter(function (s) { return s.name.endsWith(suffix); });
  }

  function timeline() {
    var tl = data.timeline;
    if (!tl || !tl.series.length) return;
    var bands = tl.bands.filter(function (b) { return b.rank === 0; });
    var stages = data.life ? data.life.stages : [];
    var s = section('Timeline', 'Drag to zoom (every chart follows), double-click to reset.' +
      (bands.length ? ' Shaded: the phases of rank 0 (red: data_loading).' : '') +
      (stages.length > 1 ? ' Grey: start-up, warm-up and tail, which every statistic of the ' +
        'report leaves out (the verdict is the steady state\u2019s).' : ''));
    if (bands.length) {
      var legend = el('p', 'bands');
      bands.forEach(function (b) {
        var k = el('span', 'band-key');
        k.style.background = BAND_COLORS[b.phase] || 'rgba(0,0,0,0.08)';
        legend.appendChild(k);
        legend.appendChild(el('span', null, b.phase + ' '));
      });
      s.appendChild(legend);
    }
    var groups = [
      { title: 'GPU utilization (%)', fine: '.utilization_fine_pct', coarse: '.utilization_pct',
        yrange: [0, 100], gpm: true },
      { title: 'GPU memory used (MiB)', coarse: '.memory_used_mib' },
      { title: 'GPU power (W)', coarse: '.power_w' },
      { title: 'SM clock (MHz)', coarse: '.sm_clock_mhz' }
    ];
    var hooks = bands.length || stages.length ? bandsPlugin(bands, stages).hooks : {};
    groups.forEach(function (g) {
      var list = g.fine ? byPrefix(g.fine) : [];
      if (!list.length) list = byPrefix(g.coarse);
      if (list.length) addTimeChart(s, g.title, list, g.yrange, hooks);
      if (g.gpm) gpmCharts(s, hooks);
    });
    var host = tl.series.filter(function (x) { return x.name.indexOf('host.') === 0; });
    if (host.length) addTimeChart(s, 'Host CPU busy, iowait, I/O pressure (%)', host, [0, 100], hooks);
  }

  // GPM (Hopper and later; issue 28): per GPU, what the hardware counters say beside utilization,
  // which only says that some kernel ran (utilization 99% can be SM active 22%). A GPM value is
  // the exact average of the window that ends at its point, so it is drawn as a step back to the
  // point before. Older runs have no such series: nothing is drawn.
  var GPM = [
    { suffix: '.sm_active_pct', label: 'SM active', color: '#2ca02c' },
    { suffix: '.tensor_active_pct', label: 'tensor active', color: '#9467bd' },
    { suffix: '.dram_active_pct', label: 'DRAM active', color: '#ff7f0e' }
  ];
  function gpmCharts(parent, hooks) {
    var all = data.timeline.series, gpus = [];
    all.forEach(function (x) {
      var m = /^gpu(\d+)\./.exec(x.name);
      var gpm = GPM.some(function (g) { return x.name.endsWith(g.suffix); });
      if (m && gpm && gpus.indexOf(m[1]) < 0) gpus.push(m[1]);
    });
    if (!gpus.length) return;
    parent.appendChild(el('p', 'note', 'GPM hardware counters, per GPU: SM active is the share ' +
      'of cycles the SMs had work, tensor active the tensor pipes\u2019, DRAM active the memory ' +
      'interface\u2019s. Each is the average since the reading before (a few seconds), drawn ' +
      'as a step over that window.'));
    var step = { width: 2 };
    if (uPlot.paths.stepped) step.paths = uPlot.paths.stepped({ align: -1 });
    gpus.forEach(function (n) {
      var named = function (suffix) {
        return all.find(function (x) { return x.name === 'gpu' + n + suffix; });
      };
      var list = [], util = named('.utilization_fine_pct') || named('.utilization_pct');
      if (util) list.push({ series: util, label: 'utilization', color: '#1f77b4' });
      GPM.forEach(function (g) {
        var x = named(g.suffix);
        if (x) list.push({ series: x, label: g.label, color: g.color, style: step });
      });
      addTimeChart(parent, 'GPU ' + n + ': utilization and hardware activity (GPM, %)', list,
                   [0, 100], hooks);
    });
  }

  // Every time chart shares one x array (all series joined once), so they span the same time.
  // `list`: series, or {series, label, color, style} to name and draw one its own way.
  var joinedAll = null;
  function addTimeChart(parent, title, list, yrange, hooks) {
    var all = data.timeline.series;
    if (!joinedAll) joinedAll = join(all);
    var ys = list.map(function (x) {
      var s = x.series || x;
      return { label: x.label || s.name, color: x.color, style: x.style,
               values: joinedAll[all.indexOf(s) + 1] };
    });
    chart(parent, title, joinedAll[0], ys,
          { sync: 'timeline', yrange: yrange, height: 200, hooks: Object.assign({}, hooks) });
  }

  // Zoom on one time chart zooms all of them.
  function syncZoom() {
    var timeCharts = charts.filter(function (u) { return u.cursor.sync && u.cursor.sync.key === 'timeline'; });
    timeCharts.forEach(function (u) {
      u.hooks.setSelect = [function (src) {
        if (src.select.width <= 0) return;
        var min = src.posToVal(src.select.left, 'x'), max = src.posToVal(src.select.left + src.select.width, 'x');
        timeCharts.forEach(function (o) { o.setScale('x', { min: min, max: max }); });
      }];
    });
  }

  function steps() {
    if (!data.steps.length) return;
    var s = section('Step times', 'Each step\u2019s duration; outliers (robust z > {{outlier_robust_z}}) marked in red.');
    data.steps.forEach(function (r) {
      if (!r.t.length) return;
      var out = r.t.map(function () { return null; });
      r.outliers.forEach(function (i) { out[i] = r.ms[i]; });
      var title = 'rank ' + r.rank + ': ' + fmt(r.per_s, 2) + ' steps/s, mean ' + fmt(r.mean_ms, 1) +
        ' ms, variation ' + fmt(r.variation, 2) + (r.period ? ', period ' + fmt(r.period, 1) + ' steps' : '');
      chart(s, title, r.t, [
        { label: 'step ms', values: r.ms, style: { points: { show: r.t.length < 400, size: 3 } } },
        { label: 'outlier', values: out, color: '#d62728',
          style: { width: 0, points: { show: true, size: 7, fill: '#d62728' } } }
      ], { ylabel: 'ms', height: 200, sync: 'timeline' });
    });
  }

  // Stacked bars per step (each series is the running sum, drawn largest first).
  function stepBreakdown() {
    if (!data.step_phases.length) return;
    var s = section('Step breakdown', 'Milliseconds of each phase in each step, stacked.');
    data.step_phases.forEach(function (r) {
      if (!r.ms.length) return;
      var xs = r.ms.map(function (_, i) { return i + 1; });
      var cum = [], acc = r.ms.map(function () { return 0; });
      r.names.forEach(function (n, j) {
        acc = acc.map(function (a, i) { return a + r.ms[i][j]; });
        cum.push({ label: n, values: acc.slice() });
      });
      cum.reverse();
      var bars = uPlot.paths.bars({ size: [0.9, 40] });
      chart(s, 'rank ' + r.rank, xs, cum.map(function (c, i) {
        var color = PALETTE[(cum.length - 1 - i) % PALETTE.length];
        return { label: c.label, values: c.values, color: color,
          style: { fill: color, paths: bars, spanGaps: false } };
      }), { xlabel: 'step', ylabel: 'ms (stacked)', height: 220 });
    });
  }

  function phaseShares() {
    if (!data.phase_shares.length) return;
    var s = section('Phase shares per rank');
    var names = [];
    data.phase_shares.forEach(function (r) {
      r.phases.forEach(function (p) { if (names.indexOf(p.name) < 0) names.push(p.name); });
    });
    table(s, ['rank'].concat(names), data.phase_shares.map(function (r) {
      return [String(r.rank)].concat(names.map(function (n) {
        var p = r.phases.find(function (x) { return x.name === n; });
        return p ? (p.share * 100).toFixed(1) + '%' : '-';
      }));
    }));
  }

  function gpus() {
    if (!data.gpus || !data.gpus.length) return;
    var s = section('GPUs and load balance');
    // GPM means (Hopper and later), only where a GPU has them: older runs have no such keys.
    var gpm = [['sm_active_mean', 'SM active mean %'], ['tensor_active_mean', 'tensor active mean %'],
               ['dram_active_mean', 'DRAM active mean %']].filter(function (c) {
      return data.gpus.some(function (g) { return typeof g[c[0]] === 'number'; });
    });
    table(s, ['GPU', 'name', 'util mean %', 'util max %'].concat(gpm.map(function (c) { return c[1]; }),
      ['memory used MiB', 'memory total MiB', 'power W']),
      data.gpus.map(function (g) {
        return [String(g.index), g.name, fmt(g.util_mean), fmt(g.util_max)].concat(
          gpm.map(function (c) { return fmt(g[c[0]]); }),
          [fmt(g.mem_used_mib, 0), fmt(g.mem_total_mib, 0), fmt(g.power_w)]);
      }));
    var b = data.balance;
    if (b) {
      s.appendChild(el('p', 'note', 'Load balance (seed 002, CV of the per-GPU means): utilization ' +
        fmt(b.util_cv_pct) + '% ' + (b.util_class || '-') + ', memory ' + fmt(b.memory_cv_pct) + '% ' +
        (b.memory_class || '-')));
    }
    if (data.gpus.length > 1 && data.gpus.some(function (g) { return g.mem_total_mib; })) {
      var xs = data.gpus.map(function (g) { return g.index; });
      var bars = uPlot.paths.bars({ size: [0.6, 60] });
      chart(s, 'Memory per GPU (MiB): used of total', xs, [
        { label: 'total', values: data.gpus.map(function (g) { return g.mem_total_mib; }), color: '#bbb',
          style: { fill: '#ddd', paths: bars } },
        { label: 'used', values: data.gpus.map(function (g) { return g.mem_used_mib; }), color: '#1f77b4',
          style: { fill: '#1f77b4', paths: bars } }
      ], { xlabel: 'GPU', ylabel: 'MiB', height: 200 });
    }
  }

  function processes() {
    if (!data.processes.length) return;
    var s = section('Processes');
    table(s, ['pid', 'role', 'CPU %', 'max %', 'running', 'blocked (D)', 'threads', 'read', 'written', 'command'],
      data.processes.map(function (p) {
        return [String(p.pid), p.role, fmt(p.cpu_mean_pct), fmt(p.cpu_max_pct),
                (p.running_share * 100).toFixed(0) + '%', (p.blocked_share * 100).toFixed(0) + '%',
                String(p.threads_max), bytes(p.read_bytes), bytes(p.write_bytes), p.cmdline || p.comm];
      }));
  }

  function loaders() {
    if (!data.dataloaders.length) return;
    var s = section('DataLoader settings');
    var keys = ['num_workers', 'batch_size', 'pin_memory', 'persistent_workers', 'prefetch_factor',
                'drop_last', 'dataset_length'];
    table(s, ['rank', 'pid'].concat(keys), data.dataloaders.map(function (l) {
      return [String(l.rank), String(l.pid)].concat(keys.map(function (k) { return fmt(l[k], 0); }));
    }));
  }

  // Where the job's Python was in each phase (report.json "stacks"): a table per phase.
  function stacks() {
    var st = data.stacks;
    if (!st || (!st.phases.length && !st.workers && !st.gpu_idle && !st.threads && !st.whole_run &&
                !st.unreadable.length)) return;
    var s = section('Python: where the main thread was');
    s.appendChild(el('p', 'note', st.steady_samples + ' samples of the ranks\u2019 main threads in ' +
      'the steady steps at ' + st.main_hz + ' Hz' + (st.torn ? ', ' + st.torn + ' torn reads dropped' : '') +
      '. A line of the job\u2019s own code; "in" names the library call under it.'));
    var groups = st.phases.slice();
    if (st.workers) groups.push(st.workers);
    if (st.gpu_idle) groups.push(st.gpu_idle);
    if (st.threads) groups.push(st.threads);
    if (st.whole_run) groups.push(st.whole_run);
    var titles = { workers: 'DataLoader workers', gpu_idle: 'while the GPU was idle',
                   threads: 'the ranks\u2019 other threads',
                   whole_run: 'the whole run (the job marked no steps)' };
    groups.forEach(function (g) {
      s.appendChild(el('h3', null, (titles[g.name] || g.name) + ' (' + g.samples + ' samples)'));
      table(s, ['share', 'line', 'function', 'code', 'in'], g.lines.map(function (l) {
        return [(l.share * 100).toFixed(0) + '%', l.where, l.function, l.text,
                l.via ? l.via + ' ' + (l.via_share * 100).toFixed(0) + '%' : ''];
      }));
    });
    st.unreadable.forEach(function (u) { s.appendChild(el('p', 'note', 'not sampled: ' + u)); });
  }

  function kernels() {
    if (data.idle.length) {
      var s = section('GPU idle time and its causes');
      var causes = Object.keys(data.idle[0].causes);
      table(s, ['rank', 'device', 'window ms', 'busy ms'].concat(causes.map(function (c) { return c + ' ms'; })),
        data.idle.map(function (d) {
          return [String(d.rank), String(d.device), fmt(d.window_ms), fmt(d.busy_ms)].concat(
            causes.map(function (c) { return fmt(d.causes[c]); }));
        }));
    }
    if (data.kernels.length) {
      var k = section('Top kernels');
      table(k, ['rank', 'kernel', 'count', 'total ms', 'mean us', 'share of busy'], data.kernels.map(function (x) {
        return [String(x.rank), x.name, String(x.count), fmt(x.total_ms, 2), fmt(x.mean_us, 1),
                (x.share * 100).toFixed(1) + '%'];
      }));
    }
  }

  function job() {
    if (!data.job) return;
    var s = section('Job');
    table(s, ['command', 'status', 'exit', 'wall s', 'host'],
      [[data.job.command, data.job.status, fmt(data.job.exit_code, 0), fmt(data.job.wall_s, 2), data.job.host]]);
  }

  function warnings() {
    if (!data.warnings.length) return;
    var s = section('Warnings');
    var ul = el('ul');
    data.warnings.forEach(function (w) { ul.appendChild(el('li', null, w)); });
    s.appendChild(ul);
  }

  // #selftest (the project's browser test): for every chart canvas, how many pixels are painted
  // at all, and how many in an opaque colour (the series: axes, grid and text are grey, the phase
  // bands translucent), written into the page as JSON.
  function selftest() {
    var out = [];
    document.querySelectorAll('canvas').forEach(function (c) {
      var px = c.getContext('2d').getImageData(0, 0, c.width, c.height).data, n = 0, colored = 0;
      for (var i = 0; i < px.length; i += 4) {
        if (px[i + 3] === 0) continue;
        n++;
        var hi = Math.max(px[i], px[i + 1], px[i + 2]), lo = Math.min(px[i], px[i + 1], px[i + 2]);
        if (px[i + 3] > 128 && hi - lo > 60) colored++;
      }
      var title = c.closest('.chart') && c.closest('.chart').querySelector('.u-title');
      out.push({ title: title ? title.textContent : '', painted: n, colored: colored,
                 pixels: c.width * c.height });
    });
    var pre = el('pre', null, JSON.stringify(out));
    pre.id = 'selftest';
    document.body.appendChild(pre);
  }

  job();
  timeline();
  steps();
  syncZoom();
  stepBreakdown();
  phaseShares();
  gpus();
  processes();
  loaders();
  stacks();
  kernels();
  warnings();
  window.addEventListener('resize', function () {
    charts.forEach(function (u) { u.setSize({ width: width(), height: u.height }); });
  });
  // A timer, not requestAnimationFrame: headless Chromium runs timers in its virtual time, while
  // a frame may not come before --virtual-time-budget ends on a loaded machine. Reading a
  // canvas's pixels needs no frame: uPlot has drawn into it by then.
  if (location.hash === '#selftest') setTimeout(selftest, 50);
  document.body.setAttribute('data-ready', 'true');
})();
