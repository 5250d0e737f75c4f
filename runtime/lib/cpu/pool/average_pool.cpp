//===- average_pool.cpp - average pooling and its gradient ------------------===//

#include "cpu/pool/pool.h"

#include "common/check.h"
#include "common/convert.h"
#include "common/convert_avx2.h"
#include "cpu/elementwise/elementwise.h"
#include "host/threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

using namespace amprt;
using namespace amprt::pool;

namespace {

/// Average pooling's 2-D windows without dilation, per output row and per
/// output column: the window's input rows [r0, r1) (and columns) inside
/// the input, and how many of its rows (columns) count towards the divisor
/// with count_include_pad (those before the end of the padded input, as
/// forWindows counts them).
struct AvgWindows2D {
  std::vector<int64_t> r0, r1, rc, c0, c1, cc;
  explicit AvgWindows2D(const Window &w) {
    auto axis = [&](int a, std::vector<int64_t> &lo, std::vector<int64_t> &hi,
                    std::vector<int64_t> &cnt) {
      lo.resize(w.out[a]);
      hi.resize(w.out[a]);
      cnt.resize(w.out[a]);
      for (int64_t o = 0; o < w.out[a]; ++o) {
        int64_t start = o * w.s[a] - w.pb[a];
        lo[o] = std::max<int64_t>(start, 0);
        hi[o] = std::max(lo[o], std::min(start + w.k[a], w.in[a]));
        cnt[o] = std::max<int64_t>(0, std::min(start + w.k[a], w.in[a] + w.pe[a]) - start);
      }
    };
    axis(0, r0, r1, rc);
    axis(1, c0, c1, cc);
  }
  /// The divisor of output (oh, ow).
  int64_t count(int64_t oh, int64_t ow, bool includePad) const {
    return includePad ? rc[oh] * cc[ow] : (r1[oh] - r0[oh]) * (c1[ow] - c0[ow]);
  }
};

/// The fast form of average pooling and its gradient: 2-D, no dilation
/// (what networks use). The same sums in the same order as the window
/// loops (rows, then columns; a gradient's shares in the outputs' order),
/// so the same results, with pointers instead of a call per position.
bool avgFast(const Window &w, const amprt_pool_params *p) {
  return p->spatial == 2 && w.d[0] == 1 && w.d[1] == 1;
}

} // namespace

extern "C" amprt_status amprt_average_pool(amprt_context *, const amprt_tensor *x,
                                           const amprt_pool_params *p, amprt_tensor *y) {
  Window w;
  AMPRT_CHECK(windowOf(x, y, p, "amprt_average_pool", w));
  if (avgFast(w, p)) {
    AvgWindows2D aw(w);
    const int64_t H = w.in[0], W = w.in[1], OH = w.out[0], OW = w.out[1];
    forPlanes(w, [&](int64_t nc0, int64_t nc1) {
      std::vector<float> xb, yb;
      for (int64_t nc = nc0; nc < nc1; ++nc) {
        const float *xp = planeF32(x, nc, H * W, xb);
        float *yp = outPlane(y, nc, OH * OW, yb);
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double sum = 0;
            for (int64_t h = aw.r0[oh]; h < aw.r1[oh]; ++h)
              for (int64_t c = aw.c0[ow]; c < aw.c1[ow]; ++c)
                sum += xp[h * W + c];
            int64_t count = aw.count(oh, ow, p->count_include_pad);
            yp[oh * OW + ow] = count ? (float)(sum / count) : 0.0f;
          }
        storePlane(y, nc, OH * OW, yp);
      }
    });
    return AMPRT_OK;
  }
  forPlanes(w, [&](int64_t nc0, int64_t nc1) {
    double sum = 0;
    int64_t count = 0;
    forWindows(
        w, nc0, nc1,
        [&](int64_t) {
          sum = 0;
          count = 0;
        },
        [&](int64_t, int64_t i) {
          if (i >= 0)
            sum += loadF(x->data, x->dtype, i);
          if (i >= 0 || p->count_include_pad)
            ++count;
        },
        [&](int64_t o) { storeF(y->data, y->dtype, o, count ? (float)(sum / count) : 0.0f); });
  });
  return AMPRT_OK;
}

extern "C" amprt_status amprt_average_pool_grad(amprt_context *, const amprt_tensor *dy,
                                                const amprt_pool_params *p, amprt_tensor *dx) {
  Window w;
  AMPRT_CHECK(windowOf(dx, dy, p, "amprt_average_pool_grad", w));
  // Each dx element sums its windows' shares in double, in the outputs'
  // order, then rounds once; a plane's windows touch only its own plane.
  const int64_t plane = w.in[0] * w.in[1] * w.in[2];
  if (avgFast(w, p)) {
    AvgWindows2D aw(w);
    const int64_t W = w.in[1], OH = w.out[0], OW = w.out[1];
    forPlanes(w, [&](int64_t nc0, int64_t nc1) {
      std::vector<double> acc((size_t)plane);
      std::vector<float> gb, xb;
      for (int64_t nc = nc0; nc < nc1; ++nc) {
        std::fill(acc.begin(), acc.end(), 0.0);
        const float *gp = planeF32(dy, nc, OH * OW, gb);
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            int64_t count = aw.count(oh, ow, p->count_include_pad);
            if (!count)
              continue;
            double g = (double)gp[oh * OW + ow] / (double)count; // in double
            for (int64_t h = aw.r0[oh]; h < aw.r1[oh]; ++h)
              for (int64_t c = aw.c0[ow]; c < aw.c1[ow]; ++c)
                acc[(size_t)(h * W + c)] += g;
          }
        float *xp = outPlane(dx, nc, plane, xb);
        for (int64_t i = 0; i < plane; ++i)
          xp[i] = (float)acc[(size_t)i];
        storePlane(dx, nc, plane, xp);
      }
    });
    return AMPRT_OK;
  }
  forPlanes(w, [&](int64_t nc0, int64_t nc1) {
    std::vector<double> acc((size_t)plane);
    std::vector<int64_t> members;
    int64_t count = 0, base = 0;
    for (int64_t nc = nc0; nc < nc1; ++nc) {
      std::fill(acc.begin(), acc.end(), 0.0);
      base = nc * plane;
      forWindows(
          w, nc, nc + 1,
          [&](int64_t) {
            members.clear();
            count = 0;
          },
          [&](int64_t, int64_t i) {
            if (i >= 0)
              members.push_back(i - base);
            if (i >= 0 || p->count_include_pad)
              ++count;
          },
          [&](int64_t o) {
            if (!count)
              return;
            double g = (double)loadF(dy->data, dy->dtype, o) / (double)count; // in double
            for (int64_t i : members)
              acc[(size_t)i] += g;
          });
      for (int64_t i = 0; i < plane; ++i)
        storeF(dx->data, dx->dtype, base + i, (float)acc[(size_t)i]);
    }
  });
  return AMPRT_OK;
}
