//===- loop.cpp - the training loop -----------------------------------------===//
//
// Each step runs on the next batch and makes each `new:<name>` result the
// next step's `<name>` argument (parameters, optimizer moments, the loss
// scale and its trackers): the buffers swap, nothing is copied. On a CUDA
// device a step is a sequence of asynchronous launches, and the loss, the
// scale and found_inf are read back only every --sync-every steps (32 by
// default; at print and checkpoint steps too): the metrics then give each
// step of a block the block's mean time. --cuda-graph: after the first
// step, the step is captured as a CUDA graph (two: the state buffers
// alternate) and each step is one graph launch; the batch is copied into a
// fixed buffer first.
//
//===----------------------------------------------------------------------===//

#include "runner.h"

#include <chrono>
#include <cmath>
#include <map>

namespace amprt::runner {

int trainLoop(Program &p, const Options &o) {
  // State: result "new:<name>" feeds argument <name> of the next step.
  Carry carry;
  std::map<std::string, size_t> argIndex, resIndex;
  for (size_t i = 0; i < p.args.size(); ++i)
    argIndex[p.args[i].name] = i;
  for (size_t i = 0; i < p.results.size(); ++i)
    resIndex[p.results[i].name] = i;
  for (size_t r = 0; r < p.results.size(); ++r) {
    const std::string &n = p.results[r].name;
    if (n.rfind("new:", 0) != 0)
      continue;
    auto it = argIndex.find(n.substr(4));
    if (it == argIndex.end() || p.args[it->second].kind != "param")
      die("'" + o.weights + "': result '" + n + "' updates no state argument");
    const Slot &a = p.args[it->second], &b = p.results[r];
    if (a.dtype != b.dtype || a.shape != b.shape)
      die("'" + o.weights + "': result '" + n + "' does not match its argument's type");
    carry.push_back({it->second, r});
    // State the step updates in place shares its argument's buffer
    // (loadProgram): the swap below leaves it where it is.
  }
  auto resultOf = [&](const char *name) -> const Slot * {
    auto it = resIndex.find(name);
    return it == resIndex.end() ? nullptr : &p.results[it->second];
  };
  if (!resultOf("loss"))
    die("the training step has no output named 'loss'");

  Data data;
  openData(p, o, data);
  if (o.cudaGraph && p.onHost)
    die("--cuda-graph needs a CUDA device (--device cuda)");
  amprt_graph *graphs[2] = {nullptr, nullptr};

  RunState rs;
  resumeRun(p, o, carry, rs);
  const std::string &ckFile = rs.ckFile;
  const int64_t start = rs.start;
  int64_t &skipped = rs.skipped;
  const char *trainingText = p.trainingString.c_str();

  amprt_metrics *metrics = nullptr;
  if (!o.metrics.empty() && (rank0() || o.metricsPerRank)) {
    if (o.resume)
      truncateMetrics(o.metrics, start);
    if (amprt_metrics_open(o.metrics.c_str(), o.resume ? 1 : 0, &metrics) != AMPRT_OK)
      die(amprt_last_error());
  }
  int64_t printEvery = o.printEvery ? o.printEvery : std::max<int64_t>(1, o.steps / 10);
  if (start < o.steps && rank0()) {
    std::printf("training: %s; %lld batch(es) of %s; steps %lld..%lld\n", trainingText,
                (long long)data.batches, o.data.c_str(), (long long)start + 1, (long long)o.steps);
    if (p.ranks > 1)
      std::printf(
          "data parallel: %lld p.ranks, each feeding its share of every batch of %lld "
          "rows\n",
          (long long)p.ranks,
          (long long)(data.feeds.empty() ? 0 : p.ranks * p.args[data.feeds.front().arg].shape[0]));
  }
  const Slot *lossSlot = resultOf("loss"), *scaleSlot = resultOf("loss_scale"),
             *foundSlot = resultOf("found_inf");
  // The scalars the loop reports, copied after each step into a history
  // block (device memory on a device) and read back a block at a time.
  const Slot *watched[3] = {lossSlot, scaleSlot, foundSlot};
  const int64_t block = p.onHost ? 1 : o.syncEvery;
  void *history = nullptr;
  if (amprt_device_alloc(p.ctx, (size_t)block * 24, &history) != AMPRT_OK)
    die(amprt_last_error());
  p.owned.push_back(history);
  std::vector<char> historyHost((size_t)block * 24);
  auto valueIn = [&](const Slot *s, const char *bytes) -> double {
    Slot tmp{s->kind, s->name, s->dtype, s->shape, {}};
    tmp.data.assign(bytes, bytes + amprt_dtype_size(s->dtype));
    return scalarOf(&tmp);
  };
  int64_t runOfSkips = 0, pending = 0, syncsInSteps = 0, syncsFirstStep = 0;
  bool warnedSkips = false;
  amprt_step_metrics m{};
  std::vector<double> times;
  auto blockStart = std::chrono::steady_clock::now();
  // Reads the pending steps' values; writes their metrics and progress.
  auto flush = [&](int64_t lastStep) {
    if (!pending)
      return;
    if (amprt_device_copy(p.ctx, historyHost.data(), history, (size_t)pending * 24, 1) !=
            AMPRT_OK ||
        amprt_device_synchronize(p.ctx) != AMPRT_OK)
      die("steps " + std::to_string(lastStep - pending + 1) + ".." + std::to_string(lastStep) +
          ": " + amprt_last_error());
    if (!p.onHost) { // the block's mean time for each of its steps
      double dt =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - blockStart).count();
      times.assign((size_t)pending, dt / (double)pending);
    }
    for (int64_t k = 0; k < pending; ++k) {
      const char *row = historyHost.data() + k * 24;
      m.step = lastStep - pending + 1 + k;
      m.loss = valueIn(lossSlot, row);
      if (p.ranks > 1) { // the job's loss: the mean of the p.ranks' (the batch of all of them)
        double sum = m.loss;
        if (g_comm->sum_f64(g_comm, &sum, 1) != AMPRT_OK)
          die(amprt_last_error());
        m.loss = sum / (double)p.ranks;
      }
      m.loss_scale = scaleSlot ? valueIn(scaleSlot, row + 8) : 1.0;
      m.found_inf = foundSlot && valueIn(foundSlot, row + 16) != 0.0;
      skipped += m.found_inf;
      m.skipped_total = skipped;
      m.step_time_s = times[(size_t)k];
      if (metrics && amprt_metrics_write(metrics, &m) != AMPRT_OK)
        die(amprt_last_error());
      runOfSkips = m.found_inf ? runOfSkips + 1 : 0;
      if (runOfSkips >= 10 && !warnedSkips) {
        std::fprintf(stderr,
                     "warning: %lld steps in a row skipped for inf / NaN gradients (scale %g): "
                     "the model is overflowing, not just the scale; lower the learning rate, "
                     "check the data, look for exp / pow / division in fp16\n",
                     (long long)runOfSkips, m.loss_scale);
        warnedSkips = true;
      }
      if (!std::isfinite(m.loss) && !m.found_inf)
        std::fprintf(stderr, "warning: step %lld: the loss is %g\n", (long long)m.step, m.loss);
      if ((m.step % printEvery == 0 || m.step == o.steps) && rank0()) {
        char line[256];
        amprt_format_progress(line, sizeof line, &m, o.steps);
        std::printf("%s\n", line);
        std::fflush(stdout);
      }
    }
    pending = 0;
    times.clear();
    blockStart = std::chrono::steady_clock::now();
  };
  for (int64_t step = start; step < o.steps; ++step) {
    feedBatch(p, data, step % data.batches);
    auto t0 = std::chrono::steady_clock::now();
    int64_t syncsBefore = amprt_device_sync_count(p.ctx);
    amprt_graph *&graph = graphs[(step - start) % 2];
    if (o.cudaGraph && step > start && !graph &&
        (amprt_graph_begin(p.ctx) != AMPRT_OK || p.step() != AMPRT_OK ||
         amprt_graph_end(p.ctx, &graph) != AMPRT_OK))
      die("step " + std::to_string(step + 1) +
          ": capturing the step as a CUDA graph: " + amprt_last_error());
    if (graph ? amprt_graph_launch(p.ctx, graph) != AMPRT_OK : p.step() != AMPRT_OK)
      die("step " + std::to_string(step + 1) + ": " + amprt_last_error());
    (step == start ? syncsFirstStep : syncsInSteps) += amprt_device_sync_count(p.ctx) - syncsBefore;
    if (p.onHost) {
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      amprt_threads_adapt(); // one thread while the machine is busy
    }
    // The new state becomes the next step's arguments (buffers swap: no copy).
    for (auto [ai, ri] : carry)
      std::swap(p.ap[ai], p.rp[ri]);
    for (int k = 0; k < 3; ++k)
      if (const Slot *ws = watched[k])
        if (amprt_device_copy(p.ctx, static_cast<char *>(history) + pending * 24 + 8 * k,
                              p.rp[ws - p.results.data()], amprt_dtype_size(ws->dtype),
                              2) != AMPRT_OK)
          die(amprt_last_error());
    ++pending;
    int64_t done = step + 1;
    bool ckNow = !ckFile.empty() && o.checkpointEvery && done % o.checkpointEvery == 0;
    if (pending == block || done % printEvery == 0 || done == o.steps || ckNow)
      flush(done);
    if (ckNow)
      saveCheckpoint(p, carry, rs, done);
  }
  if (metrics)
    amprt_metrics_close(metrics);
  if (!ckFile.empty() && start < o.steps)
    saveCheckpoint(p, carry, rs, o.steps);
  if (start < o.steps && rank0())
    std::printf("done: %lld steps, %lld skipped (%lld applied)%s\n", (long long)o.steps,
                (long long)skipped, (long long)(o.steps - skipped),
                ckFile.empty() ? "" : (", checkpoint " + ckFile).c_str());
  if (start < o.steps && !p.onHost && rank0())
    std::printf("device %s: host synchronisations inside steps: %lld in the %lld steps after "
                "the first, %lld in the first (first-use set-up); %lld in all\n",
                o.device.c_str(), (long long)syncsInSteps, (long long)(o.steps - start - 1),
                (long long)syncsFirstStep, (long long)amprt_device_sync_count(p.ctx));
  if (!o.outputs.empty() && (rank0() || o.outputsPerRank) && start < o.steps) {
    // The last step's p.results: the state p.results now sit in the argument
    // buffers (swapped above), so swap back for the write.
    for (auto [ai, ri] : carry)
      std::swap(p.ap[ai], p.rp[ri]);
    writeOutputs(o.outputs, p.results, p.resultsOnHost());
  }
  amprt_npz_close(data.npz);
  for (amprt_graph *g : graphs)
    amprt_graph_destroy(p.ctx, g);
  p.finish();
  return 0;
}

} // namespace amprt::runner
