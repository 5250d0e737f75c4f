#!/usr/bin/env python3
"""bench/hf_zoo.py's float64 judge of a loss-scale sequence that is not
GradScaler's: a one-weight model whose exact scaled gradient is placed just
over and well under fp16's largest value (65504), each with ours skipping and
ours applying the step. The judge must side with the run whose skip float64
confirms, and with neither otherwise; fresh random inputs each run."""

import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
import hf_zoo  # noqa: E402


class OneWeight(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(1, 1, bias=False)

    def forward(self, x):
        return self.lin(x).sum()  # d loss / d w = sum(x over the batch)


def inputs_with_gradient(target, gen):
    """Rows whose first batch sums to `target` (the weight's exact gradient)."""
    x = torch.rand(2 * hf_zoo.BATCH, 1, generator=gen, dtype=torch.float64) + 0.5
    first = x[:hf_zoo.BATCH]
    x[:hf_zoo.BATCH] = first * (target / float(first.sum()))
    return {"x": x.float()}


def main():
    seed = int.from_bytes(os.urandom(4), "little")
    gen = torch.Generator().manual_seed(seed)
    print(f"seed {seed}")
    net = OneWeight()
    state = net.state_dict()
    scale = 32768.0
    failures = []
    for exact, over in ((1.02 * hf_zoo.FP16_MAX / scale, True),
                        (0.3 * hf_zoo.FP16_MAX / scale, False)):
        inputs = inputs_with_gradient(exact, gen)
        for ours_skipped in (True, False):
            skipped_scale = scale / 2
            ours = [scale * 2, scale, skipped_scale if ours_skipped else scale]
            theirs = [scale * 2, scale, scale if ours_skipped else skipped_scale]
            # the first step (scale 65536) both skipped; step 2 is judged
            states = [state, state, state]
            inputs_shifted = {"x": torch.cat([inputs["x"][hf_zoo.BATCH:], inputs["x"][:hf_zoo.BATCH]])}
            verdict = hf_zoo.judge_scales(net, inputs_shifted, ours, theirs, states)
            want = over == ours_skipped
            line = (f"exact scaled gradient {exact * scale:.6g}, ours "
                    f"{'skipped' if ours_skipped else 'applied'}: {verdict}")
            print(line)
            if verdict is None or verdict[0] != want:
                failures.append(line + f" (want accepted={want})")
    same = hf_zoo.judge_scales(net, inputs, [1.0, 2.0], [1.0, 2.0], [state, state])
    if same is not None:
        failures.append(f"equal sequences judged: {same}")
    first = hf_zoo.judge_scales(net, inputs, [2.0], [1.0], [state])
    if first is None or first[0]:
        failures.append(f"a different first scale accepted: {first}")
    for f in failures:
        print("FAIL", f)
    print(f"{len(failures)} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
