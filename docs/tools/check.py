#!/usr/bin/python3
"""docs-check: checks the documentation (README.md and docs/) against the code.

usage: docs/tools/check.py [--root=DIR] [--build=DIR] [--only=RULES]

  sentences  at most 25 words a sentence on average, per page (prose only)
  links      every relative link and image points to a file that exists
  commands   every pushpull flag and `make` target quoted in a sh/bash block exists
  generated  docs/configuration.md and docs/images/timeline-*.svg are what `make docs` writes
  monitoring deploy/monitoring/: the Grafana dashboard names only exported metrics; the
             Prometheus config parses
  index      docs/README.md links every docs/*.md page
  wording    no word about how the work was organised

--root: the repository (default: the one holding this script). --build: the build directory
whose bin/ holds the binaries (default: $PUSHPULL_BUILD, else build). --only: a comma-separated
list of the rules above. Each problem is printed as PAGE:LINE: what is wrong; the exit status is
1 when there is one, 0 otherwise. `make docs-check` runs it.
"""

import argparse
import glob
import json
import os
import re
import shlex
import sys
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import configuration  # noqa: E402  (beside this file)
import timelines  # noqa: E402

RULES = ["sentences", "links", "commands", "generated", "monitoring", "index", "wording"]
MAX_WORDS = 25
# Pages for contributors and researchers: long sentences and their own commands are allowed.
NOT_USER_PAGES = {"docs/DESIGN.md", "docs/WIRE.md", "docs/PERFORMANCE.md", "docs/EXPERIMENTS.md"}
GENERATED = "docs/configuration.md"
DASHBOARD = "deploy/monitoring/grafana-dashboard.json"
PROMETHEUS = "deploy/monitoring/prometheus.yml"


class Report:
    def __init__(self):
        self.problems = []

    def add(self, page, line, what):
        self.problems.append(f"{page}:{line}: {what}" if line else f"{page}: {what}")


# ---------------------------------------------------------------------------------------------
# Pages and their parts.


def all_pages(root):
    """README.md and docs/**/*.md, as paths relative to root, sorted."""
    pages = ["README.md"] if os.path.isfile(os.path.join(root, "README.md")) else []
    found = glob.glob(os.path.join(root, "docs", "**", "*.md"), recursive=True)
    return pages + sorted(os.path.relpath(p, root) for p in found)


def user_pages(root):
    return [p for p in all_pages(root) if p not in NOT_USER_PAGES]


def read_lines(root, page):
    with open(os.path.join(root, page), encoding="utf-8") as f:
        return f.read().splitlines()


_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)")


def split_fences(lines):
    """Yields (line_no, line, fence_lang) for each line; fence_lang is None outside a fenced code
    block, the block's language ('' when none) inside it (the fence lines themselves excluded)."""
    fence = None  # (marker, lang)
    for n, line in enumerate(lines, 1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence = (m.group(1), m.group(2).lower())
            continue
        if fence is not None and m and m.group(1)[0] == fence[0][0] and len(m.group(1)) >= len(fence[0]) \
                and not m.group(2):
            fence = None
            continue
        yield n, line, (fence[1] if fence else None)


def strip_comments(numbered):
    """(line_no, text) of the lines outside fences, with HTML comments removed."""
    in_comment = False
    for n, line, lang in numbered:
        if lang is not None:
            continue
        out = ""
        rest = line
        while rest:
            if in_comment:
                end = rest.find("-->")
                if end < 0:
                    rest = ""
                else:
                    rest, in_comment = rest[end + 3:], False
            else:
                start = rest.find("<!--")
                if start < 0:
                    out, rest = out + rest, ""
                else:
                    out, rest, in_comment = out + rest[:start], rest[start + 4:], True
        yield n, out


# ---------------------------------------------------------------------------------------------
# a. Sentences.

_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
_LINK_DEF = re.compile(r"^\s*\[[^\]]+\]:\s*\S")
_ABBREV = re.compile(r"\b(e\.g|i\.e|cf|vs)\.", re.I)


def prose_blocks(lines):
    """[(line_no, text)]: each paragraph and each list item of prose, as one string (its lines
    joined by newlines)."""
    blocks = []
    cur = None  # [line_no, [texts]]
    in_table = False

    def flush():
        nonlocal cur
        if cur and any(t.strip() for t in cur[1]):
            blocks.append((cur[0], "\n".join(t.strip() for t in cur[1])))
        cur = None

    prev_raw = None
    for n, line in strip_comments(split_fences(lines)):
        if n - 1 != prev_raw:  # a fenced block (or a comment line) came between: a new block
            flush()
            in_table = False
        prev_raw = n
        s = line.strip()
        if not s:
            flush()
            in_table = False
            continue
        if in_table:
            continue
        if _TABLE_SEP.match(s) and "|" in s:
            # The line before was the table's header: not prose.
            if cur and cur[1]:
                cur[1].pop()
            flush()
            in_table = True
            continue
        if s.startswith("|"):
            flush()
            in_table = True
            continue
        if s.startswith("#") or _LINK_DEF.match(s):
            flush()
            continue
        if re.match(r"^(=+|-+)$", s):  # a setext heading's underline: the block was a heading
            cur = None
            continue
        if s.startswith(">"):
            s = s.lstrip(">").strip()
        m = _ITEM.match(line)
        if m:
            flush()
            cur = [n, [line[m.end():]]]
            continue
        if cur is None:
            cur = [n, []]
        cur[1].append(s)
    flush()
    return blocks


def _sub(pattern, repl, text):
    """re.sub that keeps the newlines of what it replaces (a link over two lines), so that a
    sentence's line can be counted."""
    def keep(m):
        r = m.expand(repl)
        return r + "\n" * (m.group(0).count("\n") - r.count("\n"))
    return re.sub(pattern, keep, text)


def _plain(text):
    text = _sub(r"`+[^`]*`+", " CODE ", text)  # inline code: a word
    text = _sub(r"!\[[^\]]*\]\([^)]*\)", " ", text)  # images: not prose
    text = _sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = _sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", text)
    text = _sub(r"<(?:https?|mailto):[^>]*>", " URL ", text)
    text = _sub(r"https?://\S+", " URL ", text)
    text = _sub(r"</?[A-Za-z][^>]*>", " ", text)  # HTML tags
    text = _ABBREV.sub(lambda m: m.group(1).replace(".", ""), text)
    return text


_SENTENCE_END = re.compile(r"(?<=[.?!])[\"')\]*_]*\s+")


def sentences(lines):
    """[(line_no, words)] of every sentence of prose on a page: split after ". ", "? " and "! ";
    a paragraph or a list item ends one too."""
    out = []
    for n, block in prose_blocks(lines):
        text = _plain(block)
        starts = [0] + [m.end() for m in _SENTENCE_END.finditer(text)]
        ends = [m.start() for m in _SENTENCE_END.finditer(text)] + [len(text)]
        for b, e in zip(starts, ends):
            words = [w for w in text[b:e].split() if re.search(r"[A-Za-z0-9]", w)]
            if words:
                out.append((n + text.count("\n", 0, b), words))
    return out


def check_sentences(root, report, out):
    for page in user_pages(root):
        if page == GENERATED:
            continue
        sents = sentences(read_lines(root, page))
        if not sents:
            continue
        words = sum(len(w) for _, w in sents)
        avg = words / len(sents)
        out(f"  {page}: {avg:.1f} words a sentence ({len(sents)} sentences)")
        if avg > MAX_WORDS:
            longest = sorted(sents, key=lambda s: -len(s[1]))[:3]
            hint = "; ".join(f"line {n}: {len(w)} words ('{' '.join(w[:6])} ...')" for n, w in longest)
            report.add(page, None, f"{avg:.1f} words a sentence on average, over {MAX_WORDS} "
                                   f"(the longest: {hint})")


# ---------------------------------------------------------------------------------------------
# b. Links.

_MD_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)")
_REF_DEF = re.compile(r"^\s*\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_HTML_LINK = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.I)


def links(lines):
    """[(line_no, target)] of every link, image and reference definition outside code."""
    out = []
    for n, line in strip_comments(split_fences(lines)):
        line = re.sub(r"`+[^`]*`+", " ", line)
        for m in _MD_LINK.finditer(line):
            out.append((n, m.group(1).strip("<>")))
        m = _REF_DEF.match(line)
        if m:
            out.append((n, m.group(1).strip("<>")))
        for m in _HTML_LINK.finditer(line):
            out.append((n, m.group(1)))
    return out


def link_path(root, page, target):
    """The file a relative link names (relative to root), or None for one not checked here."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#") or target.startswith("//"):
        return None  # http:, https:, mailto:, ...; an anchor on this page
    path = urllib.parse.unquote(target.split("#", 1)[0].split("?", 1)[0])
    if not path:
        return None
    if path.startswith("/"):  # GitHub: from the repository's root
        return os.path.normpath(path.lstrip("/"))
    return os.path.normpath(os.path.join(os.path.dirname(page), path))


def check_links(root, report, out):
    for page in all_pages(root):
        for n, target in links(read_lines(root, page)):
            path = link_path(root, page, target)
            if path is not None and not os.path.exists(os.path.join(root, path)):
                report.add(page, n, f"the link '{target}' points to {path}, which does not exist")


# ---------------------------------------------------------------------------------------------
# c. Commands.

SHELLS = {"sh", "bash", "shell", "console"}
_BINARY = re.compile(r"^(?:.*/)?(pushpull-(?:scheduler|server|worker|launch|checkpoint|bench))$")
_SEPARATORS = {"&&", "||", "|", ";", "&", "(", ")", ";;", "|&"}
_PREFIXES = {"sudo", "env", "time", "nohup", "exec", "command", "then", "do", "else", "!", "{"}


def shell_commands(lines):
    """[(line_no, command line)] in sh/bash blocks: continuation lines joined, comments and lines
    with '...' placeholders left out."""
    out = []
    pending = None
    for n, line, lang in split_fences(lines):
        if lang not in SHELLS:
            pending = None
            continue
        text = line.strip()
        if pending is not None:
            start, text = pending[0], pending[1] + " " + text
        else:
            start = n
            if text.startswith("$ "):
                text = text[2:]
            elif lang == "console":
                continue  # output, not a command
        if text.endswith("\\"):
            pending = (start, text[:-1])
            continue
        pending = None
        if not text or text.startswith("#") or "..." in text or "…" in text:
            continue
        out.append((start, text))
    return out


def tokens(text):
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        return list(lex)
    except ValueError:  # an unclosed quote (a multi-line string): words as written
        return text.split()


def makefile_targets(root):
    targets = set()
    path = os.path.join(root, "Makefile")
    if not os.path.isfile(path):
        return targets
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^([A-Za-z0-9_.][A-Za-z0-9_. -]*?)\s*::?(?!=)", line)
        if m:
            targets.update(t for t in m.group(1).split() if "%" not in t)
        m = re.match(r"^\.PHONY\s*:(.*)", line)
        if m:
            targets.update(m.group(1).split())
    targets.discard(".PHONY")
    return targets


class Flags:
    """Each binary's flags, from its --help (run once)."""

    def __init__(self, build):
        self.build = build
        self.cache = {}

    def of(self, binary):
        if binary not in self.cache:
            try:
                self.cache[binary] = configuration.flag_names(configuration.help_text(self.build, binary))
            except (OSError, RuntimeError, ValueError) as e:
                self.cache[binary] = e
        return self.cache[binary]


def _flag_problem(flags, binary, word):
    """What is wrong with `word` (a flag given to binary), or None."""
    name = word.lstrip("-").split("=", 1)[0]
    if not name or "$" in name or not re.match(r"^[A-Za-z_][\w]*$", name):
        return None
    if name in flags:
        return None
    if name.startswith("no") and flags.get(name[2:]) == "bool" and "=" not in word:
        return None
    return f"{binary} has no flag --{name} (see {binary} --help)"


def command_problems(text, flags_of, targets):
    """Problems of one command line: unknown flags of pushpull binaries, unknown make targets."""
    problems = []
    toks = tokens(text)
    at_start = True
    i = 0
    while i < len(toks):
        t = toks[i]
        if t in _SEPARATORS or t == "$(":
            at_start = True
            i += 1
            continue
        if t.endswith("$(") or t.endswith("`"):
            at_start = True
            i += 1
            continue
        if at_start and (t in _PREFIXES or re.match(r"^[A-Za-z_]\w*=", t)):
            i += 1
            continue
        if at_start and t == "make":
            j = i + 1
            while j < len(toks) and toks[j] not in _SEPARATORS:
                w = toks[j]
                if w in ("-C", "-f", "-j", "-o", "-W", "-I") and j + 1 < len(toks):
                    j += 2 if w != "-j" or toks[j + 1].isdigit() else 1
                    continue
                if not w.startswith("-") and "=" not in w and "$" not in w and w not in targets:
                    problems.append(f"make has no target '{w}' (see the Makefile)")
                j += 1
            i = j
            continue
        m = _BINARY.match(t)
        if m:
            binary = m.group(1)
            j = i + 1
            while j < len(toks) and toks[j] not in _SEPARATORS and toks[j] != "--" \
                    and not toks[j].startswith((">", "<", "2>")):
                j, problems = _check_flags(flags_of, binary, toks, j, problems)
            if j < len(toks) and toks[j] == "--" and binary == "pushpull-launch" \
                    and j + 1 < len(toks) and toks[j + 1].startswith("-"):
                j += 1  # the flags after "--" are pushpull-worker's
                while j < len(toks) and toks[j] not in _SEPARATORS and toks[j] != "--" \
                        and not toks[j].startswith((">", "<", "2>")):
                    j, problems = _check_flags(flags_of, "pushpull-worker", toks, j, problems)
                i, at_start = j, False
            elif j < len(toks) and toks[j] == "--":
                # The user's command (pushpull-launch -- CMD): a command of its own, whose flags
                # are checked only when it is a pushpull binary or make.
                i, at_start = j + 1, True
            else:
                i, at_start = j, False
            continue
        at_start = False
        i += 1
    return problems


def _check_flags(flags_of, binary, toks, j, problems):
    w = toks[j]
    if w.startswith("-") and w != "-":
        flags = flags_of(binary)
        if isinstance(flags, Exception):
            msg = f"cannot check {binary}'s flags: {flags}"
            if msg not in problems:
                problems.append(msg)
        else:
            p = _flag_problem(flags, binary, w)
            if p:
                problems.append(p)
    return j + 1, problems


def check_commands(root, build, report, out):
    flags = Flags(build)
    targets = makefile_targets(root)
    for page in user_pages(root):
        for n, text in shell_commands(read_lines(root, page)):
            for p in command_problems(text, flags.of, targets):
                report.add(page, n, p)


# ---------------------------------------------------------------------------------------------
# d. Generated pages.


def check_generated(root, build, report, out):
    path = os.path.join(root, GENERATED)
    try:
        want = configuration.render(build)
    except (OSError, RuntimeError, ValueError) as e:
        report.add(GENERATED, None, f"cannot generate it: {e}")
        want = None
    if want is not None:
        if not os.path.isfile(path):
            report.add(GENERATED, None, "missing: run `make docs`")
        else:
            have = open(path, encoding="utf-8").read()
            if have != want:
                hl, wl = have.splitlines(), want.splitlines()
                n = next((k for k in range(min(len(hl), len(wl))) if hl[k] != wl[k]), min(len(hl), len(wl)))
                now = wl[n] if n < len(wl) else "(the end of the page)"
                report.add(GENERATED, n + 1, f"stale: --help now gives '{now[:100]}': run `make docs`")
    for model in timelines.MODELS:
        rel = f"docs/images/timeline-{model}.svg"
        p = os.path.join(root, rel)
        if not os.path.isfile(p):
            report.add(rel, None, "missing: run `make docs`")
        elif open(p, encoding="utf-8").read() != timelines.draw(model):
            report.add(rel, None, "not what docs/tools/timelines.py draws: run `make docs`")


# ---------------------------------------------------------------------------------------------
# e. Monitoring.

_SOURCE_DIRS = ["server", "common", "apps", "worker", "deploy", "optimizers", "python"]
_LITERAL_METRIC = re.compile(r"\.\s*(Counter|Gauge|Histogram)\s*\(\s*\"([A-Za-z_:][\w:]*)\"")
_PREFIX_LAMBDA = re.compile(
    r"auto\s+(\w+)\s*=\s*\[[^\]]*\]\s*\([^)]*\)\s*\{[^{}]*?\.\s*(Counter|Gauge|Histogram)\s*\(\s*"
    r"std::string\s*\(\s*\"([A-Za-z_:][\w:]*)\"\s*\)\s*\+", re.S)


def exported_metrics(root):
    """Every metric name the daemons' /metrics can show, read from the sources: names written
    as literals in MetricsText's Counter/Gauge/Histogram calls, and those a lambda builds from a
    prefix (auto counter = [&](const char* name, ...) { m.Counter(std::string("prefix_") + name,
    ...) }, called as counter("suffix", ...)). A histogram's series are NAME_bucket, NAME_sum and
    NAME_count."""
    names = set()
    for d in _SOURCE_DIRS:
        for path in sorted(glob.glob(os.path.join(root, d, "**", "*.cc"), recursive=True)):
            text = open(path, encoding="utf-8", errors="replace").read()
            found = [(m.group(1), m.group(2)) for m in _LITERAL_METRIC.finditer(text)]
            for m in _PREFIX_LAMBDA.finditer(text):
                fn, kind, prefix = m.group(1), m.group(2), m.group(3)
                for call in re.finditer(r"(?<![\w.])" + re.escape(fn) + r"\s*\(\s*\"(\w+)\"", text):
                    found.append((kind, prefix + call.group(1)))
            for kind, name in found:
                if kind == "Histogram":  # its series; the name alone is none
                    names.update(name + s for s in ("_bucket", "_sum", "_count"))
                else:
                    names.add(name)
    return names


_PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "inf", "nan", "start", "end", "le",
}
# Series Prometheus itself writes for every target it scrapes.
_PROMETHEUS_SERIES = {"up", "scrape_duration_seconds", "scrape_samples_scraped",
                      "scrape_samples_post_metric_relabeling", "scrape_series_added"}


def promql_metrics(expr):
    """The metric names a PromQL expression reads."""
    e = re.sub(r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'|`[^`]*`", " ", expr)  # strings
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # ranges, subqueries
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)  # Grafana variables
    names = []
    for m in re.finditer(r"(?<![\w.:$])([A-Za-z_:][\w:]*)", e):
        word = m.group(1)
        rest = e[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in _PROMQL_WORDS:
            continue  # a function or an aggregation, a keyword
        if re.match(r"^\d", e[m.start() - 1:m.start()] or " "):
            continue  # a duration's unit (5m)
        names.append(word)
    return names


def _exprs(node, where="$"):
    """(json path, PromQL) of every "expr" in a dashboard, and templating queries."""
    if isinstance(node, dict):
        for k, v in node.items():
            here = f"{where}.{k}"
            if k == "expr" and isinstance(v, str):
                yield here, v
            elif k == "query" and isinstance(v, str) and "label_values(" in v:
                m = re.search(r"label_values\(\s*([A-Za-z_:][\w:]*)\s*[,{)]", v)
                if m and "," in v[m.start():]:
                    yield here, m.group(1)
            else:
                yield from _exprs(v, here)
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _exprs(v, f"{where}[{i}]")


def check_monitoring(root, report, out):
    path = os.path.join(root, DASHBOARD)
    if os.path.isfile(path):
        text = open(path, encoding="utf-8").read()
        try:
            board = json.loads(text)
        except ValueError as e:
            report.add(DASHBOARD, getattr(e, "lineno", None), f"not valid JSON: {e}")
            board = None
        if board is not None:
            known = exported_metrics(root)
            if not known:
                report.add(DASHBOARD, None, "found no exported metric in the sources: "
                                            "docs/tools/check.py's exported_metrics needs updating")
            count = 0
            for where, expr in _exprs(board):
                count += 1
                for name in promql_metrics(expr):
                    if name not in known and name not in _PROMETHEUS_SERIES:
                        line = next((k for k, l in enumerate(text.splitlines(), 1) if name in l), None)
                        report.add(DASHBOARD, line, f"{where} reads '{name}', a metric pushpull does not export")
            out(f"  {DASHBOARD}: {count} queries against {len(known)} exported metric names")
    path = os.path.join(root, PROMETHEUS)
    if os.path.isfile(path):
        try:
            import yaml
        except ImportError:
            report.add(PROMETHEUS, None, "cannot check it: python3-yaml is missing (make deps)")
            return
        try:
            with open(path, encoding="utf-8") as f:
                yaml.safe_load(f)
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            report.add(PROMETHEUS, mark.line + 1 if mark else None, f"not valid YAML: {e}")


# ---------------------------------------------------------------------------------------------
# f. The index.


def check_index(root, report, out):
    index = "docs/README.md"
    if not os.path.isfile(os.path.join(root, index)):
        return
    linked = set()
    for _, target in links(read_lines(root, index)):
        p = link_path(root, index, target)
        if p:
            linked.add(p)
    for page in sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        rel = os.path.relpath(page, root)
        if rel != index and rel not in linked:
            report.add(index, None, f"does not link {rel}")


# ---------------------------------------------------------------------------------------------
# g. Wording.

_WORDING = [
    (re.compile(r"\bsessions?\b", re.I), "session",
     re.compile(r"\b(interactive|ssh|shell|login|tmux|screen|terminal|user|http|tls|zmq)\s+$", re.I)),
    (re.compile(r"\breviews?\b", re.I), "review",
     # the verb ("to review", "Review the logs"), not the noun about the work
     re.compile(r"(^|[.!?:]\s+|^\s*(?:[-*+]|\d+[.)])\s+|\b(?:to|and|or|then|please)\s+)$", re.I)),
    (re.compile(r"\bissues?\s+#?\d+", re.I), "issue N", None),
    (re.compile(r"\bhelpers?\b", re.I), "helper", None),
]


def check_wording(root, report, out):
    for page in all_pages(root):
        for n, line in enumerate(read_lines(root, page), 1):
            for pattern, what, allowed_before in _WORDING:
                for m in pattern.finditer(line):
                    word, before = m.group(0), line[:m.start()]
                    if allowed_before is not None and allowed_before.search(before):
                        # "reviews" is the noun; a line that starts "review" in lower case
                        # continues a sentence of the line before.
                        if not (what == "review" and (word.lower() == "reviews" or
                                                      (not before.strip() and word[0].islower()))):
                            continue
                    report.add(page, n, f"'{word}': say what pushpull does, not how the work "
                                        f"was organised: {line.strip()[:120]}")


# ---------------------------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(HERE)))
    ap.add_argument("--build", default=os.environ.get("PUSHPULL_BUILD", "build"))
    ap.add_argument("--only", default=",".join(RULES))
    ap.add_argument("--quiet", action="store_true", help="print problems only")
    args = ap.parse_args(argv)
    rules = [r.strip() for r in args.only.split(",") if r.strip()]
    unknown = [r for r in rules if r not in RULES]
    if unknown:
        ap.error(f"unknown rule(s) {', '.join(unknown)}; the rules: {', '.join(RULES)}")
    root = os.path.abspath(args.root)
    build = args.build if os.path.isabs(args.build) else os.path.abspath(args.build)

    def out(line):
        if not args.quiet:
            print(line)

    report = Report()
    for rule in RULES:
        if rule not in rules:
            continue
        out(f"docs-check: {rule}")
        if rule == "sentences":
            check_sentences(root, report, out)
        elif rule == "links":
            check_links(root, report, out)
        elif rule == "commands":
            check_commands(root, build, report, out)
        elif rule == "generated":
            check_generated(root, build, report, out)
        elif rule == "monitoring":
            check_monitoring(root, report, out)
        elif rule == "index":
            check_index(root, report, out)
        elif rule == "wording":
            check_wording(root, report, out)
    for p in report.problems:
        print(p)
    if report.problems:
        print(f"docs-check: {len(report.problems)} problem(s)")
        return 1
    out(f"docs-check: {len(all_pages(root))} pages pass ({', '.join(rules)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
