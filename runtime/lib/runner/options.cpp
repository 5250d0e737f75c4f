//===- options.cpp - the training programs' command line --------------------===//
//
//   ./prog --inputs in.npz --outputs out.npz [--weights prog.weights]
//          [--nan-check warn|error|off] [--device cpu|cuda[:N]]
//   ./train --data data.npz --steps N [--metrics m.jsonl] [--checkpoint-dir D]
//           [--resume] [--print-every K] [--checkpoint-every K] [--outputs last.npz]
//
// docs/tools.md has the whole list.
//
//===----------------------------------------------------------------------===//

#include "runner.h"

#include <cerrno>
#include <cstdlib>

namespace amprt::runner {

Options parseOptions(int argc, char **argv) {
  Options o;
  o.weights = std::string(argv[0]) + ".weights";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto is = [&](const char *flag) {
      std::string f = flag;
      return a == f || a.rfind(f + "=", 0) == 0;
    };
    auto value = [&](const char *flag) -> std::string {
      std::string f = flag;
      if (a.rfind(f + "=", 0) == 0)
        return a.substr(f.size() + 1);
      if (a == f && i + 1 < argc)
        return argv[++i];
      die(f + " needs a value");
    };
    auto count = [&](const char *flag, int64_t lo) -> int64_t {
      std::string v = value(flag);
      char *end = nullptr;
      errno = 0;
      long long n = std::strtoll(v.c_str(), &end, 10);
      if (v.empty() || *end || errno == ERANGE || n < lo)
        die(std::string(flag) + " needs an integer >= " + std::to_string(lo) + ", got '" + v + "'");
      return n;
    };
    if (is("--inputs"))
      o.inputs = value("--inputs");
    else if (is("--outputs"))
      o.outputs = value("--outputs");
    else if (is("--weights"))
      o.weights = value("--weights");
    else if (is("--nan-check"))
      o.nanCheck = value("--nan-check");
    else if (is("--data"))
      o.data = value("--data");
    else if (is("--steps"))
      o.steps = count("--steps", 1);
    else if (is("--metrics"))
      o.metrics = value("--metrics");
    else if (is("--checkpoint-dir"))
      o.checkpointDir = value("--checkpoint-dir");
    else if (is("--print-every"))
      o.printEvery = count("--print-every", 0);
    else if (is("--checkpoint-every"))
      o.checkpointEvery = count("--checkpoint-every", 0);
    else if (a == "--resume")
      o.resume = true;
    else if (is("--device"))
      o.device = value("--device");
    else if (a == "--cuda-graph")
      o.cudaGraph = true;
    else if (is("--sync-every"))
      o.syncEvery = count("--sync-every", 1);
    else if (is("--seed"))
      o.seed = count("--seed", 0);
    else if (is("--grad-comm"))
      o.gradComm = value("--grad-comm");
    else if (a == "-h" || a == "--help") {
      std::printf("usage: %s --inputs in.npz --outputs out.npz [--weights FILE] "
                  "[--nan-check warn|error|off] [--device cpu|cuda[:N]] [--seed N]\n"
                  "       %s --data data.npz --steps N [--metrics m.jsonl] "
                  "[--checkpoint-dir D] [--resume]\n"
                  "          [--print-every K] [--checkpoint-every K] [--outputs last.npz] "
                  "[--sync-every K] [--cuda-graph] (a training step)\n"
                  "          [--grad-comm f32|bf16|fp16] (--data-parallel, under mpirun)\n",
                  argv[0], argv[0]);
      std::exit(0);
    } else
      die("unknown argument '" + a + "' (see --help)");
  }
  if (o.nanCheck != "warn" && o.nanCheck != "error" && o.nanCheck != "off")
    die("--nan-check must be warn, error or off");
  // --data: the file of every rank; --outputs and --metrics: rank 0's; each
  // rank its own where the name holds {rank}.
  perRank(o.data);
  o.outputsPerRank = perRank(o.outputs);
  o.metricsPerRank = perRank(o.metrics);
  return o;
}

} // namespace amprt::runner
