#!/usr/bin/python3
"""Writes docs/configuration.md: every flag of every pushpull binary, from its --help.

usage: docs/tools/configuration.py [--build=DIR] [--out=FILE]

DIR holds bin/pushpull-* (default: $PUSHPULL_BUILD, else build). FILE defaults to standard
output. `make docs` runs it; `make docs-check` compares its output with docs/configuration.md.
"""

import argparse
import os
import re
import subprocess
import sys

BINARIES = ["pushpull-scheduler", "pushpull-server", "pushpull-worker", "pushpull-launch",
            "pushpull-checkpoint", "pushpull-bench"]

# The flags gflags itself gives every binary (--helpfull lists them); they are real flags,
# though --help does not show them.
GFLAGS_BUILTINS = {"help": "bool", "helpfull": "bool", "helpshort": "bool", "version": "bool",
                   "flagfile": "string", "undefok": "string", "fromenv": "string",
                   "tryfromenv": "string"}

INTRO = """\
# Configuration

This page lists every flag of every pushpull binary, with its type and default. It is generated
by `make docs` from each binary's `--help`, so edit the flag's help in the code, not this page.
`make docs-check` fails when this page is stale. Flags are written `--name=value`. A bool flag
may also be written `--name` or `--noname`. Every binary also takes gflags' own flags, such as
`--flagfile=FILE` and `--version`.
"""


def help_text(build, binary):
    """The --help output of build/bin/binary, run with no PUSHPULL_* variables set."""
    path = os.path.join(build, "bin", binary)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} is not built (run make)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PUSHPULL_")}
    env["LC_ALL"] = "C"
    out = subprocess.run([path, "--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         env=env, timeout=30, check=False)
    text = out.stdout.decode("utf-8", "replace")
    if out.returncode != 0 or "Flags from" not in text:
        raise RuntimeError(f"{path} --help exited {out.returncode} without listing its flags")
    return text


_ENTRY = re.compile(r"^-(\w+) \((.*)\) type: (\w+)(?: default: (.*))?$", re.S)


def parse_help(text):
    """(usage, flags): the text before the flag list, and a list of dicts with name, help, type
    and default (as --help writes it), in --help's order."""
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if line.lstrip().startswith("Flags from"))
    usage = "\n".join(lines[:first]).rstrip()
    entries = []
    for line in lines[first + 1:]:
        if line.startswith("    -"):
            entries.append(line[4:])
        elif line.startswith("      ") and entries:
            entries[-1] += " " + line.strip()
        elif line.lstrip().startswith("Flags from"):
            continue
    flags = []
    for e in entries:
        m = _ENTRY.match(e)
        if not m:
            raise ValueError(f"cannot read this --help entry: {e!r}")
        name, doc, typ, default = m.group(1), m.group(2), m.group(3), m.group(4)
        flags.append({"name": name, "help": doc, "type": typ, "default": default})
    return usage, flags


def flag_names(text):
    """{name: type} of every flag a binary takes: those --help lists and gflags' own."""
    names = dict(GFLAGS_BUILTINS)
    for f in parse_help(text)[1]:
        names[f["name"]] = f["type"]
    return names


def _default(flag):
    d = flag["default"]
    if d is None:
        return ""
    if flag["type"] == "string":
        d = d[1:-1] if len(d) >= 2 and d[0] == d[-1] == '"' else d
        return "`" + d + "`" if d else "(empty)"
    if flag["type"] == "double":
        try:
            d = repr(float(d))  # 0.10000000000000001 -> 0.1
            d = d[:-2] if d.endswith(".0") else d
        except ValueError:
            pass
    return "`" + d + "`"


def _cell(text):
    text = text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*")
    # An address in code, so that GitHub does not make a link of it.
    return re.sub(r"https?://[^\s()]+", lambda m: "`" + m.group(0) + "`", text)


def render(build):
    out = [INTRO]
    out.append("The binaries:\n")
    for b in BINARIES:
        out.append(f"- [{b}](#{b})")
    out.append("")
    for b in BINARIES:
        usage, flags = parse_help(help_text(build, b))
        out.append(f"## {b}\n")
        out.append(f"`{b} --help` begins with this text:\n")
        out.append("```text\n" + usage + "\n```\n")
        out.append("| Flag | Type | Default | Meaning |")
        out.append("|---|---|---|---|")
        for f in flags:
            out.append(f"| `--{f['name']}` | {f['type']} | {_default(f)} | {_cell(f['help'])} |")
        out.append("")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.environ.get("PUSHPULL_BUILD", "build"))
    ap.add_argument("--out", default="-")
    args = ap.parse_args(argv)
    try:
        text = render(args.build)
    except (OSError, RuntimeError, ValueError) as e:
        print(f"configuration.py: {e}", file=sys.stderr)
        return 1
    if args.out == "-":
        sys.stdout.write(text)
    else:
        with open(args.out, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
