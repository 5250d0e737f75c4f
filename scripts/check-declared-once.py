#!/usr/bin/env python3
"""One fact, one place: fails (naming each culprit) when

  1. an "amp.*" attribute name is spelled as a string literal in the C++ or
     Python sources outside its declarations (mlir::amp::attrname in
     AMPDialect.h; the weights file's keys, AMPRT_META_* in amprt_io.h;
     python/amp_mlir/attrnames.py for Python);
  2. python/amp_mlir/attrnames.py disagrees with AMPDialect.h;
  3. a pass option's flag (Passes.td) is spelled as a string literal in the
     sources outside Passes.td (the tools' flags and the pipelines' options
     come from PipelineOptions.h.inc; a pass names its own options by
     getArgStr()), except where the same word names something else (an
     ONNX attribute, a struct field the Python runtime binds).

    check-declared-once.py SOURCE_DIR
"""

import os
import re
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
CODE_DIRS = ["lib", "tools", "include", "runtime", "python"]
EXTS = (".cpp", ".h", ".c", ".cu", ".py", ".inc")
ATTR_DECLS = {"include/amp/Dialect/AMP/IR/AMPDialect.h", "runtime/include/amprt/amprt_io.h",
              "python/amp_mlir/attrnames.py"}
# Words that are pass option flags and also, in these files, something else:
# (file, flag) -> what it is there.
OTHER_MEANING = {
    ("lib/Transforms/Autocast.cpp", "accumulate"): "the accumulate attribute of a product",
    ("lib/Transforms/Autocast.cpp", "target"): "a report's JSON key",
    ("lib/Transforms/AutocastGraph.cpp", "dot"): "Graphviz's program",
    ("lib/Transforms/AutocastRules.cpp", "accumulate"): "the policy file's key",
    ("lib/Transforms/AutocastPolicy.cpp", "accumulate"): "the policy file's key",
    ("python/amp_mlir/runtime.py", "*"): "the C structs of amprt.h (ctypes fields)",
    ("python/amp_mlir/demo.py", "report"): "a demo sub-command",
    ("python/amp_mlir/torch_bridge.py", "frozen"): "fit's plan",
    ("python/amp_mlir/torch_bridge.py", "output"): "the exported graph's output name",
    ("python/amp_mlir/torch_bridge.py", "label"): "fit's own keyword check",
    ("python/amp_mlir/iree_train.py", "output"): "a signature role",
    ("python/amp_mlir/train.py", "optimizer"): "compile_training's keyword",
    ("python/amp_mlir/train.py", "policy"): "compile_training's keyword",
    ("lib/Target/ONNX/DomainPreviewTraining.cpp", "nesterov"): "an ONNX attribute's value",
}
# Flags that are common words: a literal of them is another thing more
# often than not (ONNX attributes: mode, momentum; output names: loss).
COMMON = {"loss", "mode", "output", "kind", "momentum", "label", "target"}


def sources():
    for d in CODE_DIRS:
        for base, dirs, files in os.walk(os.path.join(ROOT, d)):
            dirs[:] = [x for x in dirs if x not in ("__pycache__",)]
            for f in files:
                if f.endswith(EXTS):
                    p = os.path.join(base, f)
                    yield os.path.relpath(p, ROOT), open(p, encoding="utf-8").read()


def strip_comments(path, text):
    if path.endswith(".py"):
        return re.sub(r"(?m)^\s*#.*$", "", text)
    return re.sub(r"(?m)//.*$", "", text)


def pass_flags():
    flags = set()
    for td in ("include/amp/Transforms/Passes.td", "include/amp/Conversion/Passes.td"):
        text = open(os.path.join(ROOT, td)).read()
        flags |= set(re.findall(r'(?:List)?Option<"\w+",\s*"([\w-]+)"', text))
    return flags


def main():
    problems = []
    decl = open(os.path.join(ROOT, "include/amp/Dialect/AMP/IR/AMPDialect.h")).read()
    cxx = dict(re.findall(r'StringLiteral k(\w+) = "(amp\.\w+)"', decl))
    py = dict(re.findall(r'(?m)^(\w+) = "(amp\.\w+)"', open(
        os.path.join(ROOT, "python/amp_mlir/attrnames.py")).read()))
    for name, value in py.items():
        camel = "".join(w.capitalize() for w in name.lower().split("_"))
        if cxx.get(camel) != value:
            problems.append(f"python/amp_mlir/attrnames.py: {name} = {value!r}, but AMPDialect.h "
                            f"has k{camel} = {cxx.get(camel)!r}")
    flags = pass_flags()
    for path, text in sources():
        code = strip_comments(path, text)
        if path not in ATTR_DECLS:
            for m in re.finditer(r'"(amp\.[a-z_0-9]+)"', code):
                line = code.count("\n", 0, m.start()) + 1
                problems.append(f"{path}:{line}: the attribute name {m.group(0)} spelled "
                                f"out (use its declaration)")
        if "PipelineOptions" in path or (path, "*") in OTHER_MEANING:
            continue
        for flag in flags - COMMON:
            if (path, flag) in OTHER_MEANING:
                continue
            for m in re.finditer(r'"%s"' % re.escape(flag), code):
                line = code.count("\n", 0, m.start()) + 1
                problems.append(f"{path}:{line}: the pass option {m.group(0)} spelled out (the "
                                f"pipelines' rows, PipelineFlags or getArgStr() give it)")
    for p in problems:
        print(p)
    print(f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
