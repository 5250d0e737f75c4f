//===- main.cpp - the main() of programs written by amp-compile -----------===//
//
//   ./prog --inputs in.npz --outputs out.npz [--weights prog.weights]
//          [--nan-check warn|error|off] [--device cpu|cuda[:N]]
//
// A training step (amp-compile --optimizer ...) also runs in a loop:
//
//   ./train --data data.npz --steps N [--metrics m.jsonl] [--checkpoint-dir D]
//           [--resume] [--print-every K] [--checkpoint-every K] [--outputs last.npz]
//
// Each step feeds the next full batch of every input (the arrays of data.npz
// named like the inputs, cut into batches of the program's batch size, in
// order, starting again after the last), runs the step, and makes each
// `new:<name>` result the next step's `<name>` argument (parameters,
// optimizer moments, the loss scale and its trackers). --steps counts all
// steps of the run, so `--resume` continues an interrupted run to N. The
// checkpoint (D/checkpoint.safetensors) holds every state tensor and, in its
// metadata, the step, the skipped-step count and the dropout generator's
// state (amp.rng_state), so a resumed run draws the masks it would have
// drawn. --seed N seeds the generator (dropout's masks; a fixed default
// state without it).
//
// --device: where the program runs; by default where it was compiled for
// (amp.device in the weights' metadata; amp-compile --device cuda). On a
// CUDA device the parameters, the state, the arena and the whole data set
// live in device memory; a step is a sequence of asynchronous launches and
// the loop reads the loss, the scale and found_inf back only every
// --sync-every steps (32 by default; at print and checkpoint steps too): no
// host synchronisation inside a step, one per block of steps. The metrics
// then give each step of a block the block's mean time. --cuda-graph: after
// the first step, the step is captured as a CUDA graph (two: the state
// buffers alternate) and each step is one graph launch; the batch is copied
// into a fixed buffer first.
//
// Links with the object amp-compile emits (which defines amp_entry) and
// libamprt. The weights file beside the program (safetensors) holds the
// parameters and, in its metadata, the program's signature:
//
//   amp.arena_bytes  N
//   amp.signature    one line per argument / result:
//                    "input|param|result|result_inplace <TAB> name <TAB> dtype
//                     <TAB> d0,d1,..."; result_inplace: a state result the
//                    program may write into its argument's buffer (the loop
//                    passes one buffer for both; the others swap per step)
//
//===----------------------------------------------------------------------===//

#include "runner.h"

#include <new>

#include <unistd.h>

using namespace amprt::runner;

int main(int argc, char **argv) {
  // An allocation that fails (a data file too large for this machine) ends
  // the run with a message, not an uncaught std::bad_alloc.
  std::set_new_handler([] {
    static const char msg[] = "error: out of memory\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
  });
  startJob(&argc, &argv);
  Options o = parseOptions(argc, argv);
  Program p;
  loadProgram(o, p);
  const bool loop = !o.data.empty() || o.steps >= 0;
  return loop ? trainLoop(p, o) : runOnce(p, o);
}
