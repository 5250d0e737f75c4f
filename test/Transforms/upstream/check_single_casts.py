"""Fails when a value is cast to a narrower float type more than once in
amp-opt's output (linalg.generic of arith.truncf, or tosa.cast)."""
import re
import sys

LINALG = re.compile(r"linalg\.generic \{[^}]*\} ins\((%[\w#]+) : tensor<[^>]*xf32>\) "
                    r"outs\(%[\w#]+ : tensor<[^>]*x(?:bf16|f16)>\)")
TOSA = re.compile(r"tosa\.cast (%[\w#]+) : \(tensor<[^>]*xf32>\) -> tensor<[^>]*x(?:bf16|f16)>")
bad = 0
for path in sys.argv[1:]:
    text = open(path).read()
    counts = {}
    for pat in (LINALG, TOSA):
        for m in pat.finditer(text):
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
    if not counts:
        print(f"{path}: no narrowing cast found")
        bad += 1
    for v, n in counts.items():
        if n > 1:
            print(f"{path}: {v} is cast {n} times")
            bad += 1
sys.exit(1 if bad else 0)
