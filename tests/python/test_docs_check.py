"""docs/tools/check.py (`make docs-check`) catches each problem it is for: small pages in a
temporary tree, each with one fault, and one tree with none."""

import importlib.util
import json
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("PUSHPULL_BUILD", "build"))
_spec = importlib.util.spec_from_file_location("docs_check", os.path.join(ROOT, "docs", "tools", "check.py"))
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

needs_build = pytest.mark.skipif(not os.access(os.path.join(BUILD, "bin", "pushpull-launch"), os.X_OK),
                                 reason="the binaries are not built")

GOOD_PAGE = """\
# Running a job

This page shows how to run a job on one machine. It takes a minute.

```sh
make demo   # trains on a local cluster
build/bin/pushpull-launch --servers=2 --workers=2 --consistency=ssp:2 -- --app=linreg --epochs=5
pushpull-launch --workers=2 -- ./my_trainer --my-own-flag=1
pushpull-server --scheduler=tcp://10.0.0.1:7000 --noverbose && pushpull-checkpoint --dir=/ckpt
pushpull-launch ... -- --anything   # a placeholder: not checked
```

See [the index](README.md) and [the Slurm script](../deploy/slurm/job.sbatch).
- A list item without a period
- Another one, with [a link](https://example.com/x) and an [anchor](#running-a-job)

| A table | is not prose, however long its cells are: one two three four five six seven eight |
|---|---|
"""

MAKEFILE = """\
.PHONY: all demo test
all: x
demo:
\techo demo
install: all
"""

DASHBOARD = {
    "panels": [
        {"type": "row", "panels": [
            {"targets": [{"expr": 'sum by (server) (rate(pushpull_server_pushes_total{job="pushpull"}[$__rate_interval]))'}]}]},
        {"targets": [{"expr": "histogram_quantile(0.9, sum(rate(pushpull_server_pull_staleness_bucket[5m])) by (le))"},
                     {"expr": "max(pushpull_job_workers{state=\"live\"}) / pushpull_job_workers_expected offset 5m"},
                     {"expr": "up"}]},
    ],
    "templating": {"list": [{"query": "label_values(pushpull_server_pushes_total, server)"}]},
}

METRICS_SOURCE = """\
std::string Render() {
  MetricsText m;
  auto counter = [&](const char* name, const char* help, uint64_t v) {
    m.Counter(std::string("pushpull_server_") + name, help, double(v), server);
  };
  counter("pushes_total", "Pushes.", stats.pushes);
  m.Histogram("pushpull_server_pull_staleness", "Staleness.", bounds, counts, sum, server);
  m.Gauge("pushpull_job_workers", "Workers by state.", double(n), {{"state", state}});
  m.Gauge(
      "pushpull_job_workers_expected", "--num_workers.", num_workers_);
  return m.str();
}
"""


def write(root, rel, text):
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def good_tree(root, generated=True):
    write(root, "Makefile", MAKEFILE)
    write(root, "README.md", "# x\n\nA short page. It links [the guide](docs/guide.md).\n")
    write(root, "docs/guide.md", GOOD_PAGE)
    write(root, "docs/README.md", "# Index\n\n- [Guide](guide.md)\n- [Configuration](configuration.md)\n")
    write(root, "deploy/slurm/job.sbatch", "#!/bin/bash\n")
    write(root, "server/fake_metrics.cc", METRICS_SOURCE)
    write(root, check.DASHBOARD, json.dumps(DASHBOARD, indent=2))
    write(root, check.PROMETHEUS, "scrape_configs:\n  - job_name: pushpull\n    static_configs:\n"
                                  "      - targets: ['localhost:9100']\n")
    if generated:
        write(root, check.GENERATED, check.configuration.render(BUILD))
        for model in check.timelines.MODELS:
            write(root, f"docs/images/timeline-{model}.svg", check.timelines.draw(model))
    else:
        write(root, check.GENERATED, "# Configuration\n")


def run(root, capsys, only=None):
    argv = [f"--root={root}", f"--build={BUILD}"] + ([f"--only={only}"] if only else [])
    rc = check.main(argv)
    return rc, capsys.readouterr().out


@needs_build
def test_a_good_tree_passes(tmp_path, capsys):
    good_tree(str(tmp_path))
    rc, out = run(tmp_path, capsys)
    assert rc == 0, out
    assert "docs/guide.md:" in out and "words a sentence" in out


def test_a_page_of_long_sentences_fails(tmp_path, capsys):
    good_tree(str(tmp_path), generated=False)
    long = " ".join(["word"] * 30) + ". "
    write(tmp_path, "docs/long.md", "# Long\n\n" + long * 3 + "\n\n```sh\n" + long * 20 + "\n```\n")
    rc, out = run(tmp_path, capsys, "sentences")
    assert rc == 1
    assert "docs/long.md: 30.0 words a sentence on average, over 25" in out
    assert "line 3: 30 words" in out
    # The pages for contributors may have long sentences.
    os.rename(tmp_path / "docs/long.md", tmp_path / "docs/DESIGN.md")
    assert run(tmp_path, capsys, "sentences")[0] == 0


def test_a_dead_link_fails(tmp_path, capsys):
    good_tree(str(tmp_path), generated=False)
    write(tmp_path, "docs/guide.md", GOOD_PAGE + "\nAnd ![a picture](images/none.svg).\n"
                                                 "See [tuning](tuning.md#memory).\n")
    rc, out = run(tmp_path, capsys, "links")
    assert rc == 1
    assert "docs/guide.md:20: the link 'images/none.svg' points to docs/images/none.svg" in out
    assert "docs/guide.md:21: the link 'tuning.md#memory' points to docs/tuning.md" in out
    assert out.count("does not exist") == 2


@needs_build
def test_an_unknown_flag_or_make_target_fails(tmp_path, capsys):
    good_tree(str(tmp_path), generated=False)
    write(tmp_path, "docs/run.md", "# Run\n\nRun it.\n\n```bash\n"
          "build/bin/pushpull-launch --servers=2 --worker=2 -- --app=linreg\n"
          "$HOME/pushpull/bin/pushpull-launch --workers=2 -- --app=linreg --epoch=3\n"
          "sudo make instal\n"
          "pushpull-scheduler --num_servers=1 \\\n  --num_workerz=2\n"
          "# pushpull-server --not_checked_in_a_comment\n"
          "```\n")
    rc, out = run(tmp_path, capsys, "commands")
    assert rc == 1
    assert "docs/run.md:6: pushpull-launch has no flag --worker " in out
    assert "docs/run.md:7: pushpull-worker has no flag --epoch " in out
    assert "docs/run.md:8: make has no target 'instal'" in out
    assert "docs/run.md:9: pushpull-scheduler has no flag --num_workerz " in out
    assert "not_checked" not in out
    assert out.count("has no") == 4


@needs_build
def test_a_stale_configuration_page_fails(tmp_path, capsys):
    good_tree(str(tmp_path))
    page = tmp_path / check.GENERATED
    page.write_text(page.read_text().replace("| `--workers` |", "| `--workerz` |"))
    rc, out = run(tmp_path, capsys, "generated")
    assert rc == 1
    assert "docs/configuration.md:" in out and "stale" in out and "--workers" in out
    (tmp_path / "docs/images/timeline-ssp.svg").write_text("<svg/>")
    assert "docs/images/timeline-ssp.svg: not what" in run(tmp_path, capsys, "generated")[1]


def test_a_dashboard_naming_an_unknown_metric_fails(tmp_path, capsys):
    good_tree(str(tmp_path), generated=False)
    assert run(tmp_path, capsys, "monitoring")[0] == 0
    board = json.loads(json.dumps(DASHBOARD))
    board["panels"][1]["targets"].append({"expr": "rate(pushpull_server_pushes_totl[1m]) * 2"})
    write(tmp_path, check.DASHBOARD, json.dumps(board, indent=2))
    rc, out = run(tmp_path, capsys, "monitoring")
    assert rc == 1
    assert "reads 'pushpull_server_pushes_totl', a metric pushpull does not export" in out
    write(tmp_path, check.DASHBOARD, '{"panels": [}')
    assert "not valid JSON" in run(tmp_path, capsys, "monitoring")[1]
    write(tmp_path, check.PROMETHEUS, "scrape_configs:\n  - job_name: [pushpull\n")
    assert "deploy/monitoring/prometheus.yml:" in run(tmp_path, capsys, "monitoring")[1]


def test_the_metric_names_are_read_from_the_real_sources():
    names = check.exported_metrics(ROOT)
    for name in ["pushpull_server_pushes_total", "pushpull_server_parked_pulls", "pushpull_server_pull_staleness_bucket",
                 "pushpull_server_pull_staleness_count", "pushpull_job_workers", "pushpull_job_checkpoint_clock",
                 "pushpull_worker_clock", "pushpull_worker_pulls_total", "pushpull_app_loss"]:
        assert name in names
    assert "pushpull_server_pull_staleness" not in names  # a histogram: only its series
    assert not any(n.startswith("pushpull_server_pushes_totl") for n in names)


def test_promql_names():
    assert check.promql_metrics('sum by (le) (rate(a_b_total{x="y(z)"}[5m])) / ignoring(x) c offset 1h') == ["a_b_total", "c"]
    assert check.promql_metrics("histogram_quantile(0.99, rate(h_bucket[$__rate_interval]))") == ["h_bucket"]


def test_the_index_must_link_every_page(tmp_path, capsys):
    good_tree(str(tmp_path), generated=False)
    write(tmp_path, "docs/tuning.md", "# Tuning\n\nShort.\n")
    rc, out = run(tmp_path, capsys, "index")
    assert rc == 1 and "docs/README.md: does not link docs/tuning.md" in out


def test_words_about_the_work_fail(tmp_path, capsys):
    good_tree(str(tmp_path), generated=False)
    write(tmp_path, "docs/ok.md", "# Ok\n\nReview the logs. Start an interactive session with salloc.\n"
                                  "")
    assert run(tmp_path, capsys, "wording")[0] == 0
    numbered = "issue" + " 12"  # (spelt apart: the tree's own wording check would flag this file)
    write(tmp_path, "docs/bad.md", f"# Bad\n\nAs the review asked, this was added in {numbered}.\n"
                                   "It was changed after the\nreview. Reviews and sessions, and a helper.\n")
    rc, out = run(tmp_path, capsys, "wording")
    assert rc == 1
    assert "docs/bad.md:3: 'review'" in out and f"docs/bad.md:3: '{numbered}'" in out
    assert "docs/bad.md:5: 'review'" in out and "docs/bad.md:5: 'Reviews'" in out
    assert "docs/bad.md:5: 'sessions'" in out and "docs/bad.md:5: 'helper'" in out
    assert out.count("how the work was organised") == 6
