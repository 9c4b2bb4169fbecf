"""Compares two builds' transport figures (compare_builds.sh): per case, the median over rounds
of its ratio against raw ZeroMQ, before (A*.jsonl) and after (B*.jsonl), and after / before."""
import glob
import json
import re
import statistics
import sys


def load(pattern):
    cases = {}
    for path in sorted(glob.glob(pattern)):
        for line in open(path):
            r = json.loads(line)
            if r.get("ratio") is not None:
                cases.setdefault(r["case"], []).append(r["ratio"])
    return cases


def main(out):
    a, b = load(out + "/A*.jsonl"), load(out + "/B*.jsonl")
    rows = [(c, statistics.median(a[c]), statistics.median(b[c])) for c in a if c in b]
    if not rows:
        sys.exit("compare_builds: no case measured by both builds in " + out)
    goals = re.compile(r"^(pushpull|sparse_pushpull|pull_p50)/(4KB|1MB|16MB|64MB)/|^pull_2s_vs_1s|^server_rss_adam/")
    print(f"{'case':36s} {'before':>8s} {'after':>8s} {'after/before':>12s}")
    for case, ra, rb in rows:
        if goals.search(case):
            print(f"{case:36s} {ra:8.3f} {rb:8.3f} {rb / ra:12.3f}")
    for name, pick in (("throughput", lambda c: "_p50" not in c and "_p99" not in c),
                       ("latency", lambda c: "_p50" in c or "_p99" in c)):
        q = [rb / ra for c, ra, rb in rows if pick(c) and ra > 0]
        if len(q) >= 4:
            lo, mid, hi = statistics.quantiles(q, n=4)
            print(f"{name} cases: {len(q)}, after/before median {mid:.3f}, quartiles {lo:.3f} .. {hi:.3f}")


if __name__ == "__main__":
    main(sys.argv[1])
