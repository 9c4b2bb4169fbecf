#!/usr/bin/python3
"""Draws docs/images/timeline-{bsp,ssp,asp}.svg: three workers, one of them slow, six clocks
each, under each consistency model: when each worker computes, pushes, and waits in a pull.

usage: docs/tools/timelines.py [OUT_DIR]   (default: docs/images beside this folder)

The timelines come from a small simulation of the rule the servers apply: a worker that has
finished c clocks pulls for clock c, and the pull waits until every worker has finished at least
c - bound clocks (BSP: bound 0; SSP:K: bound K; ASP: no wait). Plain SVG, no dependencies, the
same bytes every run.
"""

import os
import sys

WORKERS = 3
CLOCKS = 6
COMPUTE = [3, 3, 9]  # time units a clock's computation takes; worker 2 is the slow one
PUSH = 1             # time units a push takes

MODELS = {
    "bsp": (0, "BSP: at the end of every clock, the faster workers wait for the slowest one"),
    "ssp": (2, "SSP, bound 2: a worker waits only when more than 2 clocks ahead of the slowest"),
    "asp": (None, "ASP: no worker ever waits; a pull returns what the servers hold now"),
}

COLOURS = {"compute": "#4c78a8", "push": "#f58518", "wait": "#e45756"}


def simulate(bound):
    """Per worker, a list of (kind, start, end, clock) segments; kind: compute, push, wait."""
    done = [[None] * CLOCKS for _ in range(WORKERS)]  # done[w][c]: when w's push of clock c ends
    segs = [[] for _ in range(WORKERS)]
    free = [0] * WORKERS  # when each worker is ready to start its next clock
    # Clock by clock, all workers: a worker's start at clock c depends only on clocks < c.
    for c in range(CLOCKS):
        for w in range(WORKERS):
            start = free[w]
            need = None if bound is None else c - bound - 1  # every worker must have pushed clock `need`
            if need is not None and need >= 0:
                start = max(start, max(done[v][need] for v in range(WORKERS)))
            if start > free[w]:
                segs[w].append(("wait", free[w], start, c))
            end_compute = start + COMPUTE[w]
            segs[w].append(("compute", start, end_compute, c))
            segs[w].append(("push", end_compute, end_compute + PUSH, c))
            done[w][c] = free[w] = end_compute + PUSH
    return segs


def _num(x):
    """A coordinate as few characters as it needs, the same on every machine."""
    s = "%.2f" % x
    return s.rstrip("0").rstrip(".")


def draw(model):
    bound, title = MODELS[model]
    segs = simulate(bound)
    horizon = max(s[2] for ws in segs for s in ws)
    # Every picture uses the same time scale (that of the slowest model), so that they compare.
    horizon = max(horizon, max(s[2] for m in MODELS for ws in simulate(MODELS[m][0]) for s in ws))
    left, top, lane, gap, unit = 130, 48, 30, 14, 10
    width = left + horizon * unit + 30
    axis_y = top + WORKERS * (lane + gap)
    height = axis_y + 80
    out = []
    a = out.append
    a('<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
      'font-family="Helvetica, Arial, sans-serif" font-size="13">' % (width, height, width, height))
    a('<title>%s</title>' % title)
    a('<rect x="0" y="0" width="%d" height="%d" fill="#ffffff"/>' % (width, height))
    a('<text x="12" y="24" font-size="15" font-weight="bold" fill="#222222">%s</text>' % title)
    for w in range(WORKERS):
        y = top + w * (lane + gap)
        label = "worker %d%s" % (w, " (slow)" if COMPUTE[w] == max(COMPUTE) else "")
        a('<text x="12" y="%s" fill="#222222" dominant-baseline="middle">%s</text>'
          % (_num(y + lane / 2), label))
        a('<line x1="%d" y1="%s" x2="%d" y2="%s" stroke="#dddddd"/>'
          % (left, _num(y + lane / 2), left + horizon * unit, _num(y + lane / 2)))
        for kind, s, e, c in segs[w]:
            x, wd = left + s * unit, (e - s) * unit
            a('<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="#ffffff"/>'
              % (x, y, wd, lane, COLOURS[kind]))
            if kind == "compute":
                a('<text x="%s" y="%s" fill="#ffffff" text-anchor="middle" dominant-baseline="middle">%d</text>'
                  % (_num(x + wd / 2), _num(y + lane / 2), c))
            elif kind == "wait" and wd >= 40:
                a('<text x="%s" y="%s" fill="#ffffff" text-anchor="middle" dominant-baseline="middle">wait</text>'
                  % (_num(x + wd / 2), _num(y + lane / 2)))
    # The time axis, a tick every 10 units.
    a('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444444"/>' % (left, axis_y, left + horizon * unit, axis_y))
    for t in range(0, horizon + 1, 10):
        x = left + t * unit
        a('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#444444"/>' % (x, axis_y, x, axis_y + 5))
        a('<text x="%d" y="%d" fill="#444444" font-size="11" text-anchor="middle">%d</text>' % (x, axis_y + 18, t))
    a('<text x="%d" y="%d" fill="#444444" font-size="11" text-anchor="end">time</text>'
      % (left - 8, axis_y + 18))
    # The legend.
    ly = axis_y + 44
    x = 12
    for kind, text in (("compute", "compute at clock N (the number)"), ("push", "push gradients"),
                       ("wait", "wait: a pull blocked on slower workers")):
        a('<rect x="%d" y="%d" width="18" height="14" fill="%s"/>' % (x, ly - 11, COLOURS[kind]))
        a('<text x="%d" y="%d" fill="#222222">%s</text>' % (x + 24, ly, text))
        x += 24 + 7 * len(text) + 24
    a('</svg>')
    return "\n".join(out) + "\n"


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    out_dir = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(here), "images")
    os.makedirs(out_dir, exist_ok=True)
    for model in MODELS:
        with open(os.path.join(out_dir, "timeline-%s.svg" % model), "w") as f:
            f.write(draw(model))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
