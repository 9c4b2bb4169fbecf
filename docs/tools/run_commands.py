#!/usr/bin/python3
"""run-commands: runs every shell command of the user pages, as written, and checks its exit status.

usage: docs/tools/run_commands.py [--root=DIR] [--build=DIR] [--timeout=S] [--keep] [--dry-run]
                                  [--self-test] [PAGE ...]

PAGE: pages relative to the root (default: README.md, docs/tutorial-cpp.md, docs/tutorial-python.md).

What runs. For each page, in page order:
  - every command of its sh/bash blocks, as docs/tools/check.py's shell_commands() reads them
    (continuation lines joined; comments, output lines and lines with '...' left out);
  - every file the page defines: a code block right after an HTML comment that names it,
    `<!-- fit.cc: anything -->`, is written as fit.cc when the page reaches it. Such a block is a
    file, never commands.

Where. Each page gets a fresh directory: a link to each top-level entry of the repository
(Makefile, include/, ...), a copy of examples/ (its commands build there), `build` linking the
build directory under test (what a command builds there, such as `make`'s or pip's build/pip,
stays), and the page's files. HOME is a fresh directory too, so that
`make install PREFIX=$HOME/pushpull` installs there. Each command runs as `bash -e -c COMMAND`,
in the directory and with the environment the page's earlier commands left: an `export` or a
`cd` holds for the rest of the page. PATH is the caller's: a page that runs pushpull-launch from
PATH must export it. MAKEFLAGS keeps only the caller's variables (CUDA=0, ARCH=...), not BUILD.

The documented exit status is 0, unless the command's line ends with a comment that starts with
`exits N`:

    build/bin/pushpull-launch --workers=2 -- ./fit --target=1.0   # exits 3: the target is missed

The documented output. A ```text (or plain ```) block after a command block, before the next
one, shows what the block's last command prints. Each of its lines must be among that command's
lines, with every number masked (times, pids and figures change from run to run).

A smaller run. A job too long for `make test` may run smaller through an HTML comment right
before its block, on the page for everyone to see:

    <!-- run_commands: --epochs=5 => --epochs=1 -->

Each command of that block holding the left side runs with the right side in its place, and the
runner prints what it ran. A left side that no command of the block holds is an error.

Skipped, each with its reason printed: `make test` and `make demo` (they run this runner
themselves; .ci/run runs them), `sudo` lines, and `make deps` when a package is missing (it runs
with apt-get and sudo replaced by stubs: when all packages are there it runs as written).

Each command is printed with its exit status and time, then a summary. The exit status is 0 when
every command has its documented status (and output), 1 otherwise, naming the first that has not
with its output's tail (the page's later commands do not run), 2 when the runner cannot start.
--self-test first runs the runner's own tests (docs/tools/test_run_commands.py).
"""

import argparse
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check  # noqa: E402  (beside this file: how pages and their commands are read)

PAGES = ["README.md", "docs/tutorial-cpp.md", "docs/tutorial-python.md"]
TIMEOUT_S = 300
# Commands build in examples/: a copy keeps the tree clean. Everything else is linked.
COPIED = {"examples"}
NOT_LINKED = {".git", "build"}
# The caller's environment that would change what a page's commands do.
DROPPED_ENV = re.compile(r"^(MAKEFLAGS|MFLAGS|MAKELEVEL|MAKEOVERRIDES|PKG_CONFIG_PATH|PYTHONPATH|PUSHPULL_\w+)$")
# A make variable that the runner's own caller set but a page's command must not inherit.
DROPPED_MAKE_VARS = {"BUILD", "PREFIX", "DESTDIR"}
_FILE_MARKER = re.compile(r"^\s*<!--\s*([A-Za-z0-9_][A-Za-z0-9_.-]*\.[A-Za-z0-9]+)\s*:.*-->\s*$")
_SMALLER = re.compile(r"^\s*<!--\s*run_commands\s*:\s*(.*?)\s*=>\s*(.*?)\s*-->\s*$")
_EXITS = re.compile(r"^exits\s+(\d+)\b")
OUTPUT_LANGS = {"", "text"}


# ---------------------------------------------------------------------------------------------
# Reading a page.


class Block:
    def __init__(self, line, lang, body):
        self.line = line  # the opening fence's line
        self.lang = lang
        self.body = body  # [(line_no, text)]
        self.comments = []  # the one-line HTML comments right before the fence


def blocks(lines):
    """[Block] of every fenced block of a page, in order, with the comments before each."""
    out = []
    for n, line, lang in check.split_fences(lines):
        if lang is None:
            continue
        if out and out[-1].body and out[-1].body[-1][0] == n - 1 and out[-1].lang == lang:
            out[-1].body.append((n, line))
        else:
            out.append(Block(n - 1, lang, [(n, line)]))
    for b in out:
        k = b.line - 2  # the line before the fence, 0-based
        while k >= 0 and (not lines[k].strip() or re.match(r"^\s*<!--.*-->\s*$", lines[k])):
            if lines[k].strip():
                b.comments.insert(0, lines[k])
            k -= 1
    return out


def comment_start(text):
    """Where the comment that ends a shell command line starts (None when it has none): the first
    '#' that starts a word outside quotes."""
    quote = None
    i = 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\" and quote == '"':
                i += 1
            elif c == quote:
                quote = None
        elif c == "\\":
            i += 1
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or text[i - 1].isspace() or text[i - 1] in ";&|()"):
            return i
        i += 1
    return None


def trailing_comment(text):
    i = comment_start(text)
    return "" if i is None else text[i + 1:].strip()


def bare(text):
    """A command line without its trailing comment."""
    i = comment_start(text)
    return text if i is None else text[:i].rstrip()


def documented_status(text):
    m = _EXITS.match(trailing_comment(text))
    return int(m.group(1)) if m else 0


class Step:
    """One thing a page does: write a file, or run a command."""

    def __init__(self, page, line, kind, text, content=None):
        self.page, self.line, self.kind, self.text, self.content = page, line, kind, text, content
        self.status = documented_status(text) if kind == "command" else None
        self.run_as = text  # the command as run (a smaller run's replacement applied)
        self.output = None  # [str]: the output the page shows after it
        self.skip = None  # the reason it does not run
        self.result = None  # "passed", "failed", "skipped", "not run"
        self.rc = None
        self.seconds = 0.0
        self.log = None
        self.problem = None  # how it differs from the page
        self.tail = []  # its output's last lines, when it failed

    def where(self):
        return f"{self.page}:{self.line}"


def page_steps(root, page):
    """[Step] of a page, in page order; raises ValueError for a page the runner cannot follow."""
    lines = check.read_lines(root, page)
    steps = []
    last = None  # the last command of the last command block, until another block comes
    for b in blocks(lines):
        marker = next((m for m in map(_FILE_MARKER.match, b.comments) if m), None)
        if marker:
            steps.append(Step(page, b.line, "file", marker.group(1),
                              "\n".join(t for _, t in b.body) + "\n"))
            continue
        if b.lang in OUTPUT_LANGS:
            if last is not None:
                last.output = [t for _, t in b.body if t.strip()]
            last = None
            continue
        last = None
        if b.lang not in check.SHELLS:
            continue
        # check.shell_commands reads a whole page: give it this block alone, at its lines.
        sub = [""] * (b.line - 1) + ["```" + b.lang] + [t for _, t in b.body] + ["```"]
        cmds = [Step(page, n, "command", t) for n, t in check.shell_commands(sub)]
        for m in map(_SMALLER.match, b.comments):
            if not m:
                continue
            old, new = m.group(1), m.group(2)
            hit = [c for c in cmds if old in c.text]
            if not hit:
                raise ValueError(f"{page}:{b.line}: '<!-- run_commands: {old} => {new} -->': no command "
                                 f"of the block below holds '{old}'")
            for c in hit:
                c.run_as = c.run_as.replace(old, new)
        for c in cmds:
            c.skip = skip_reason(c.text)
        if cmds:
            last = cmds[-1]
        steps.extend(cmds)
    return steps


def make_goals(text):
    """The goals of a command that is one `make` call (None for any other command)."""
    toks = check.tokens(text)
    if not toks or toks[0] != "make" or any(t in check._SEPARATORS for t in toks):
        return None
    return [t for t in toks[1:] if not t.startswith("-") and "=" not in t]


def skip_reason(text):
    toks = check.tokens(text)
    words = [t for t in toks if not re.match(r"^[A-Za-z_]\w*=", t)]
    if words and words[0] == "sudo":
        return "it needs root (sudo)"
    goals = make_goals(text) or []
    for g in ("test", "demo"):
        if g in goals:
            return f"`make {g}` runs these commands itself (.ci/run runs it)"
    return None


# ---------------------------------------------------------------------------------------------
# Running a page.


def caller_make_vars(makeflags):
    """The variables of MAKEFLAGS (after its ' -- ', as make writes it) that a page's make keeps."""
    if " -- " not in f" {makeflags} ":
        return []
    rest = f" {makeflags} ".split(" -- ", 1)[1]
    words = re.split(r"(?<!\\) ", rest.strip())
    return [w for w in words if "=" in w and w.split("=", 1)[0] not in DROPPED_MAKE_VARS]


def base_env(home):
    env = {k: v for k, v in os.environ.items() if not DROPPED_ENV.match(k)}
    keep = caller_make_vars(os.environ.get("MAKEFLAGS", ""))
    if keep:
        env["MAKEFLAGS"] = " -- " + " ".join(keep)
    env["HOME"] = home
    return env


def make_workdir(root, build, top):
    """The page's directory: the tree linked (examples/ copied), `build` the build under test."""
    work = os.path.join(top, "work")
    os.makedirs(work)
    for name in sorted(os.listdir(root)):
        if name in NOT_LINKED or name.startswith("build-"):
            continue
        src = os.path.join(root, name)
        if name in COPIED and os.path.isdir(src):
            shutil.copytree(src, os.path.join(work, name), symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        else:
            os.symlink(src, os.path.join(work, name))
    os.symlink(build, os.path.join(work, "build"))
    return work


def build_flags_problem(work, env, build, scratch):
    """Why a `make` in the page's directory would rebuild the build under test with other flags
    (None when it would not): the compile flags a plain make writes, against the build's own."""
    have = os.path.join(build, "compile-flags")
    if not os.path.isfile(have):
        return None
    probe = os.path.join(scratch, "probe")
    subprocess.run(["make", "-n", "-s", f"BUILD={probe}", "deps"], cwd=work, env=env,
                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
    want = os.path.join(probe, "compile-flags")
    if not os.path.isfile(want):
        return None
    want, have = read_text(want).split(), read_text(have).split()
    if want == have:
        return None
    extra = " ".join(w for w in want if w not in have) or "(none)"
    missing = " ".join(w for w in have if w not in want) or "(none)"
    return (f"a plain `make` would rebuild {build} with other flags (its own {missing}; instead {extra}): "
            f"give the switches it was made with in MAKEFLAGS, e.g. MAKEFLAGS=' -- CUDA=0'")


def _stubs(scratch):
    """A directory of apt-get and sudo stubs (for `make deps`) and the file each touches."""
    d = os.path.join(scratch, "stubs")
    mark = os.path.join(scratch, "stubs-ran")
    if not os.path.isdir(d):
        os.makedirs(d)
        for name in ("apt-get", "sudo"):
            p = os.path.join(d, name)
            with open(p, "w") as f:
                f.write(f"#!/bin/sh\necho \"run_commands.py: not running {name} $*\" >&2\n"
                        f"touch {shlex.quote(mark)}\nexit 100\n")
            os.chmod(p, 0o755)
    return d, mark


def run_command(step, cwd, env, scratch, timeout, index):
    """Runs one command; returns (cwd, env) as it left them."""
    state = os.path.join(scratch, f"state-{index}")
    os.makedirs(state)
    step.log = os.path.join(scratch, f"command-{index}.log")
    env_in, env = env, dict(env)
    stub_dir = None
    if make_goals(step.run_as) == ["deps"]:
        stub_dir, mark = _stubs(scratch)
        env["PATH"] = stub_dir + os.pathsep + env.get("PATH", "")
    script = (f"trap 'pwd >{shlex.quote(state)}/cwd; env -0 >{shlex.quote(state)}/env' EXIT\n"
              f"{step.run_as}\n")
    start = time.monotonic()
    with open(step.log, "wb") as log:
        proc = subprocess.Popen(["bash", "-e", "-c", script], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            step.rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            step.rc = None
        finally:
            # Whatever the command left running (a launcher's daemons) ends with it.
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    step.seconds = time.monotonic() - start
    if stub_dir and os.path.exists(mark):
        os.remove(mark)
        why = next((line for line in read_log(step.log) if "installing" in line), "packages are missing")
        step.skip = f"it would install packages with apt-get ({why.strip()})"
        return cwd, env_in
    try:
        new_cwd = read_text(os.path.join(state, "cwd")).strip()
        raw = read_text(os.path.join(state, "env"))
        new_env = dict(kv.split("=", 1) for kv in raw.split("\0") if "=" in kv)
    except OSError:
        return cwd, env_in
    for k in ("_", "SHLVL", "OLDPWD"):
        new_env.pop(k, None)
    if stub_dir:
        new_env["PATH"] = new_env.get("PATH", "").replace(stub_dir + os.pathsep, "", 1)
    return (new_cwd if os.path.isdir(new_cwd) else cwd), new_env


def read_text(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def read_log(path):
    try:
        return read_text(path).splitlines()
    except OSError:
        return []


def _masked(line):
    return " ".join(re.sub(r"\d+", "#", line).split())


def output_problem(step):
    """The first line of the page's shown output that the command did not print, or None."""
    if not step.output:
        return None
    printed = {_masked(line) for line in read_log(step.log)}
    for line in step.output:
        if _masked(line) not in printed:
            return f"the page shows the line '{line.strip()}', which it did not print (numbers aside)"
    return None


def run_page(root, build, page, timeout, out, keep):
    """Runs a page's steps; returns them, each with its result."""
    steps = page_steps(root, page)
    top = tempfile.mkdtemp(prefix="pushpull-docs-")
    try:
        home = os.path.join(top, "home")
        scratch = os.path.join(top, "scratch")
        os.makedirs(home)
        os.makedirs(scratch)
        work = make_workdir(root, build, top)
        cwd, env = work, base_env(home)
        out(f"run-commands: {page} (in {work})")
        failed = False
        flags_checked = False
        for i, step in enumerate(steps):
            if failed:
                step.result = "not run"
                continue
            if step.kind == "file":
                with open(os.path.join(work, step.text), "w") as f:
                    f.write(step.content)
                out(f"  {step.where()}: wrote {step.text}")
                continue
            if step.skip:
                step.result = "skipped"
                out(f"  {step.where()}: SKIPPED {step.text}\n      ({step.skip})")
                continue
            if make_goals(step.run_as) is not None and not flags_checked:
                flags_checked = True
                problem = build_flags_problem(work, env, build, scratch)
                if problem:
                    raise RuntimeError(problem)
            shown = step.text if step.run_as == step.text else f"{step.run_as}\n      (the page's {step.text})"
            out(f"  {step.where()}: {shown}")
            cwd, env = run_command(step, cwd, env, scratch, timeout, i)
            if step.skip:
                step.result = "skipped"
                out(f"      SKIPPED after {step.seconds:.1f} s ({step.skip})")
                continue
            status = "timed out" if step.rc is None else f"exit {step.rc}"
            if step.rc != step.status:
                problem = f"{status} after {timeout} s" if step.rc is None else f"{status}, documented {step.status}"
            else:
                problem = output_problem(step)
            step.result = "failed" if problem else "passed"
            if problem:
                step.problem, step.tail = problem, read_log(step.log)[-30:]
                failed = True
                out(f"      FAILED: {problem} ({step.seconds:.1f} s); its output's last lines:")
                for line in step.tail:
                    out(f"      | {line}")
            else:
                checked = ", output as shown" if step.output else ""
                out(f"      {status} as documented{checked} ({step.seconds:.1f} s)")
    finally:
        if keep:
            out(f"  kept {top}")
        else:
            shutil.rmtree(top, ignore_errors=True)
    return steps


def plural(n, word):
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def run(root, build, pages, timeout=TIMEOUT_S, out=print, keep=False):
    """Runs the pages; returns the exit status (0, 1, or 2)."""
    all_steps = []
    start = time.monotonic()
    for page in pages:
        if not os.path.isfile(os.path.join(root, page)):
            out(f"run-commands: no page {page} under {root}")
            return 2
        try:
            all_steps += run_page(root, build, page, timeout, out, keep)
        except (ValueError, RuntimeError) as e:
            out(f"run-commands: cannot run {page}: {e}")
            return 2
    commands = [s for s in all_steps if s.kind == "command"]
    count = {r: sum(1 for s in commands if s.result == r) for r in ("passed", "failed", "skipped", "not run")}
    out(f"run-commands: {plural(len(commands), 'command')} on {plural(len(pages), 'page')} in "
        f"{time.monotonic() - start:.0f} s: "
        + ", ".join(f"{n} {r}" for r, n in count.items() if n))
    ran = sorted((s for s in commands if s.result in ("passed", "failed")), key=lambda s: -s.seconds)
    if ran:
        out("  the longest: " + "; ".join(f"{s.where()} {s.seconds:.0f} s" for s in ran[:3]))
    for s in commands:
        if s.result == "skipped":
            out(f"  skipped {s.where()} {bare(s.text)}: {s.skip}")
    first = next((s for s in commands if s.result == "failed"), None)
    if first:
        out(f"run-commands: FAILED: {first.where()}: `{first.run_as}`: {first.problem}; its output ended:")
        for line in first.tail[-15:]:
            out(f"  | {line}")
        return 1
    return 0


def self_test(out):
    import unittest
    import test_run_commands  # noqa: E402  (beside this file)
    out("run-commands: its own tests (docs/tools/test_run_commands.py)")
    suite = unittest.defaultTestLoader.loadTestsFromModule(test_run_commands)
    return unittest.TextTestRunner(verbosity=1).run(suite).wasSuccessful()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="*", default=PAGES)
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(HERE)))
    ap.add_argument("--build", default=os.environ.get("PUSHPULL_BUILD", "build"))
    ap.add_argument("--timeout", type=float, default=TIMEOUT_S, help="seconds a command may run")
    ap.add_argument("--keep", action="store_true", help="keep each page's directory")
    ap.add_argument("--dry-run", action="store_true", help="list what would run")
    ap.add_argument("--self-test", action="store_true", help="run the runner's own tests first")
    args = ap.parse_args(argv)
    root = os.path.abspath(args.root)
    build = os.path.abspath(args.build)
    if args.self_test and not self_test(print):
        print("run-commands: its own tests failed")
        return 1
    if args.dry_run:
        for page in args.pages:
            for s in page_steps(root, page):
                what = f"file {s.text}" if s.kind == "file" else (
                    f"SKIP ({s.skip}) {s.text}" if s.skip else f"exit {s.status}: {s.run_as}")
                print(f"{s.where()}: {what}")
        return 0
    if not os.path.isdir(os.path.join(build, "bin")):
        print(f"run-commands: {build}/bin does not exist: build first (make)")
        return 2
    sys.stdout.reconfigure(line_buffering=True)
    return run(root, build, args.pages, args.timeout, print, args.keep)


if __name__ == "__main__":
    sys.exit(main())
