"""What the bench commands measured, written into docs/results.md.

Each command ends with `results.record(args, ...)`: it prints its table
(markdown) and replaces that command's section of docs/results.md, between

    <!-- begin bench/NAME.py (written by the command; do not edit) -->
    <!-- end bench/NAME.py -->

(appended under "## Latest bench runs" the first time), with the command
line, the date, the commit and the machine (CPU model and the features that
decide the kernels: AMX, AVX-512 BF16 / FP16, AVX-512, AVX2; cores), since
the machines this project runs on differ. `--results PATH` writes another
file, `--results none` only prints.
"""

import datetime
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT = os.path.join(HERE, "..", "docs", "results.md")
HEADING = "## Latest bench runs"


def add_args(ap):
    ap.add_argument("--results", default=DEFAULT,
                    help="the markdown file whose section this command replaces "
                         "(default docs/results.md; 'none': print only)")


def machine():
    """The CPU model, its kernel-relevant features and the core count."""
    model, flags = "unknown CPU", set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown CPU":
                    model = line.split(":", 1)[1].strip()
                elif line.startswith("flags") and not flags:
                    flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    feats = [name for flag, name in [("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"),
                                     ("avx512_fp16", "AVX512-FP16"), ("avx512f", "AVX-512"),
                                     ("avx2", "AVX2")] if flag in flags]
    return f"{model} ({', '.join(feats) or 'no AVX2'}), {os.cpu_count()} cores"


def commit():
    """HEAD's short hash, "-dirty" when sources differ from it (results.md aside)."""
    try:
        head = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
        changed = subprocess.run(["git", "-C", os.path.join(HERE, ".."), "status", "--porcelain",
                                  "--untracked-files=no", "--", ".", ":!docs/results.md"],
                                 capture_output=True, text=True, timeout=10).stdout.strip()
        return (head + ("-dirty" if changed else "")) if head else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def table(header, rows):
    """Markdown table lines."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return lines


def record(args, title, header, rows, notes=(), part=None):
    """Prints the table and writes it as this command's section of --results
    (`part`: a section of its own, for a run the command's default does not
    make)."""
    name = os.path.basename(sys.argv[0])
    argv, shown = sys.argv[1:], []
    skip = False
    for a in argv:  # the command line without --results (and its value)
        if skip:
            skip = False
        elif a == "--results":
            skip = True
        elif not a.startswith("--results="):
            shown.append(a)
    command = " ".join([".venv/bin/python", f"bench/{name}"] + shown)
    body = ([f"### {title}", "",
             f"`{command}`: {datetime.date.today().isoformat()}, commit {commit()}, "
             f"{machine()}.", ""] + table(header, rows))
    if notes:
        body += [""] + list(notes)
    print("\n" + "\n".join(body))
    path = getattr(args, "results", DEFAULT)
    if not path or path == "none":
        return
    key = f"bench/{name}" + (f" {part}" if part else "")
    begin = f"<!-- begin {key} (written by the command; do not edit) -->"
    end = f"<!-- end {key} -->"
    section = "\n".join([begin] + body + [end])
    text = open(path).read() if os.path.exists(path) else "# Results\n"
    pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        if HEADING not in text:
            text = text.rstrip("\n") + "\n\n" + HEADING + "\n\nEach section below is written by " \
                "its command (`bench/results.py`); rerun the command to refresh it.\n"
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    print(f"(written to {os.path.relpath(path)})")
