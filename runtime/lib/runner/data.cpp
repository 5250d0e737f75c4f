//===- data.cpp - the data set, cut into batches ----------------------------===//
//
// Each step feeds the next full batch of every input (the arrays of data.npz
// named like the inputs, cut into batches of the program's batch size, in
// order, starting again after the last). Data parallel: a batch of the data
// set is ranks x the program's batch; rank r feeds its r-th share. On a
// CUDA device the whole data set lives in device memory.
//
//===----------------------------------------------------------------------===//

#include "runner.h"

namespace amprt::runner {

void openData(Program &p, const Options &o, Data &ds) {
  if (amprt_npz_open(o.data.c_str(), &ds.npz) != AMPRT_OK)
    die(amprt_last_error());

  int64_t batches = -1;
  std::string batchesFrom;
  for (size_t i = 0; i < p.args.size(); ++i) {
    Slot &s = p.args[i];
    if (s.kind != "input")
      continue;
    const amprt_array *a = amprt_npz_get(ds.npz, s.name.c_str());
    if (!a) {
      std::string have = arrayNames(ds.npz);
      die("input '" + s.name + "' is missing from '" + o.data +
          "' (it holds: " + (have.empty() ? "nothing" : have) + ")");
    }
    if (s.shape.empty() || a->rank != (int32_t)s.shape.size())
      die("input '" + s.name + "' in '" + o.data + "' has rank " + std::to_string(a->rank) +
          ", the program's input has rank " + std::to_string(s.shape.size()) +
          (s.shape.empty() ? " (a scalar input cannot be batched)" : ""));
    for (size_t d = 1; d < s.shape.size(); ++d)
      if (a->shape[d] != s.shape[d])
        die("input '" + s.name + "' in '" + o.data + "': dimension " + std::to_string(d) + " is " +
            std::to_string(a->shape[d]) + ", the program needs " + std::to_string(s.shape[d]));
    if (s.shape[0] == 0)
      die("the program's input '" + s.name +
          "' has a batch of 0 rows: --data cannot feed it "
          "batches (give its inputs with --inputs)");
    // Data parallel: a batch of the data set is ranks x the program's
    // batch; rank r feeds its r-th share.
    if (a->shape[0] < p.ranks * s.shape[0])
      die("input '" + s.name + "' in '" + o.data + "' has " + std::to_string(a->shape[0]) +
          " rows, fewer than the program's batch of " + std::to_string(s.shape[0]) +
          (p.ranks > 1 ? " times " + std::to_string(p.ranks) + " ranks" : std::string()));
    int64_t nb = a->shape[0] / (p.ranks * s.shape[0]);
    {
      std::string dims = s.name + ":" + std::to_string(a->dtype);
      for (int32_t d = 0; d < a->rank; ++d)
        dims += "," + std::to_string(a->shape[d]);
      p.jobHash = mixHash(p.jobHash, dims);
    }
    if (batches >= 0 && nb != batches)
      die("input '" + s.name + "' in '" + o.data + "' holds " + std::to_string(nb) + " batches, '" +
          batchesFrom + "' holds " + std::to_string(batches));
    batches = nb;
    batchesFrom = s.name;
    int64_t row = amprt_dtype_size(a->dtype);
    for (int32_t d = 1; d < a->rank; ++d)
      row *= a->shape[d];
    ds.feeds.push_back({i, a, row});
    if (!p.onHost) {
      // Every full batch (data parallel: this rank's share of each),
      // converted to the program's type, copied once.
      Slot all{s.kind, s.name, s.dtype, s.shape, {}};
      all.shape[0] = nb * s.shape[0];
      all.data.resize((size_t)all.numel() * amprt_dtype_size(s.dtype));
      const size_t batchBytes = all.data.size() / (size_t)std::max<int64_t>(nb, 1);
      std::string what = "input '" + s.name + "' in '" + o.data + "'";
      for (int64_t b = 0; b < nb; ++b) {
        amprt_array share = *a;
        share.data = static_cast<const char *>(a->data) + (b * p.ranks + p.rank) * s.shape[0] * row;
        share.shape[0] = s.shape[0];
        if (amprt_feed(&share, s.dtype, (int32_t)s.shape.size(), s.shape.data(),
                       all.data.data() + b * batchBytes, what.c_str()) != AMPRT_OK)
          die(amprt_last_error());
      }
      ds.feeds.back().device = static_cast<char *>(p.deviceBuffer(all));
      p.upload(all, ds.feeds.back().device);
      if (o.cudaGraph)
        ds.feeds.back().staging = static_cast<char *>(p.ap[i]);
    }
    // NaN in the data: said once, before training.
    int64_t first;
    int64_t total = a->shape[0] * (row / (int64_t)amprt_dtype_size(a->dtype));
    int64_t bad = amprt_count_nonfinite(a->data, a->dtype, total, &first);
    if (bad && o.nanCheck != "off") {
      std::string msg = "input '" + s.name + "' in '" + o.data + "' holds " + std::to_string(bad) +
                        " NaN / inf value(s), the first at flat index " + std::to_string(first);
      if (o.nanCheck == "error")
        die(msg + " (--nan-check=error)");
      std::fprintf(stderr, "warning: %s\n", msg.c_str());
    }
  }
  warnUnusedArrays(ds.npz, p.args, o.data, [](const Slot &s) { return s.kind == "input"; });
  ds.batches = batches < 0 ? 1 : batches;
}

void feedBatch(Program &p, const Data &ds, int64_t b) {
  for (const Feed &f : ds.feeds) {
    Slot &s = p.args[f.arg];
    if (f.device) { // this batch's rows, already on the device
      const char *rows = f.device + b * (int64_t)s.data.size();
      if (f.staging) {
        if (amprt_device_copy(p.ctx, f.staging, rows, s.data.size(), 2) != AMPRT_OK)
          die(amprt_last_error());
      } else {
        p.ap[f.arg] = const_cast<char *>(rows);
      }
      continue;
    }
    amprt_array view = *f.array;
    view.data =
        static_cast<const char *>(f.array->data) + (b * p.ranks + p.rank) * s.shape[0] * f.rowBytes;
    view.shape[0] = s.shape[0];
    std::string what = "input '" + s.name + "' (batch " + std::to_string(b) + ")";
    if (amprt_feed(&view, s.dtype, (int32_t)s.shape.size(), s.shape.data(), p.ap[f.arg],
                   what.c_str()) != AMPRT_OK)
      die(amprt_last_error());
  }
}

} // namespace amprt::runner
