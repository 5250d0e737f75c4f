//===- amx.cpp - bf16 products with few summands on AMX ------------------===//
//
// c = a @ b for bf16 a and b with f32 c, on the AMX tiles directly: for the
// products whose sums are short (k up to a few hundred) and whose result is
// large, weight gradients above all (a convolution's dy [oc, P] against its
// im2col columns with P = batch x output positions, a linear layer's dy^T x
// over the tokens). oneDNN's matmul runs these at a third to a half of the
// speed of writing the result (resnet18's 512 x 512 x 3 x 3 weight
// gradient at batch 8 on 2 x 2 maps: [512 x 32] @ [32 x 4608] in 0.69 ms,
// here 0.27): it packs and blocks for long sums. Here both operands are
// packed once into 16 x 32 tiles (a: rows of 32 consecutive k; b: the VNNI
// pairs TDPBF16PS reads), 64 bytes a row, and each 16 x 16 tile of c is
// summed in its tile register, 32 products a step, in the order of k, and
// stored once. The arithmetic is TDPBF16PS's, as oneDNN's AMX kernels:
// exact products, f32 sums, bf16 subnormal operands read as zero.
//
//===----------------------------------------------------------------------===//

#include "common/check.h"
#include "common/convert.h"
#include "cpu/matmul/matmul.h"
#include "host/threads.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <vector>

#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define AMPRT_HAVE_AMX_CODE 1
#endif

using namespace amprt;

#if AMPRT_HAVE_AMX_CODE

#define AMPRT_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")))

AMPRT_AVX512_QUIET_BEGIN // (see internal.h)

namespace {

/// The tile configuration (palette 1): every register 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, startRow = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
  TileConfig() {
    for (int t = 0; t < 8; ++t) {
      colsb[t] = 64;
      rows[t] = 16;
    }
  }
};

constexpr int64_t kTile = 512; // bf16 elements of a packed 16 x 32 tile

/// Rows 0..15 of r (32-bit words) transposed in place: r[j] word i = the
/// old r[i] word j.
AMPRT_AMX inline void transpose16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 16; i += 4) {
    r[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    r[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    r[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    r[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 16; i += 8)
    for (int j = 0; j < 4; ++j) {
      t[i + j] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0x88);
      t[i + j + 4] = _mm512_shuffle_i32x4(r[i + j], r[i + j + 4], 0xdd);
    }
  for (int j = 0; j < 8; ++j) {
    r[j] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0x88);
    r[j + 8] = _mm512_shuffle_i32x4(t[j], t[j + 8], 0xdd);
  }
}

/// count (0 to 32) bf16 at p, the rest 0.
AMPRT_AMX inline __m512i load32(const uint16_t *p, int64_t count) {
  if (count <= 0)
    return _mm512_setzero_si512();
  __mmask32 m = count >= 32 ? (__mmask32)0xFFFFFFFFu : (__mmask32)((1u << count) - 1);
  return _mm512_maskz_loadu_epi16(m, p);
}

/// Two runs of 16 bf16 (count each, the rest 0) interleaved: words (x[q],
/// y[q]) for q = 0..15.
AMPRT_AMX inline __m512i pairs16(const uint16_t *x, const uint16_t *y, int64_t count) {
  const __m512i idx = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8,
                                       39, 7, 38, 6, 37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  __m512i a = x ? load32(x, std::min<int64_t>(count, 16)) : _mm512_setzero_si512();
  __m512i b = y ? load32(y, std::min<int64_t>(count, 16)) : _mm512_setzero_si512();
  return _mm512_permutex2var_epi16(a, idx, b);
}

/// One operand in strides: element (r, s) at p[r * s0 + s * s1].
struct View {
  const uint16_t *p;
  int64_t s0, s1;
  uint16_t at(int64_t r, int64_t s) const { return p[r * s0 + s * s1]; }
};

/// a's tile (it, kc) into t: rows i = it * 16 + r, columns k = kc * 32 + q
/// (zero outside m x k).
AMPRT_AMX void packATile(View a, int64_t m, int64_t k, int64_t it, int64_t kc, uint16_t *t) {
  const int64_t i0 = it * 16, k0 = kc * 32, kn = std::min<int64_t>(32, k - k0);
  if (a.s1 == 1) { // rows of a: copies
    for (int r = 0; r < 16; ++r)
      _mm512_storeu_si512(t + r * 32, i0 + r < m ? load32(a.p + (i0 + r) * a.s0 + k0, kn)
                                                 : _mm512_setzero_si512());
    return;
  }
  if (a.s0 == 1) { // a stored by columns: pairs of its k-rows, transposed
    const int64_t in = std::min<int64_t>(16, m - i0);
    __m512i v[16];
    for (int kp = 0; kp < 16; ++kp) {
      int64_t ka = k0 + 2 * kp;
      v[kp] = pairs16(ka < k ? a.p + ka * a.s1 + i0 : nullptr,
                      ka + 1 < k ? a.p + (ka + 1) * a.s1 + i0 : nullptr, in);
    }
    transpose16x16(v);
    for (int r = 0; r < 16; ++r)
      _mm512_storeu_si512(t + r * 32, v[r]);
    return;
  }
  for (int r = 0; r < 16; ++r)
    for (int q = 0; q < 32; ++q)
      t[r * 32 + q] = i0 + r < m && q < kn ? a.at(i0 + r, k0 + q) : 0;
}

/// b's tile (jt, kc) in TDPBF16PS's pairs into t: row p holds, for each
/// column j = jt * 16 + q, b[k0 + 2p, j] and b[k0 + 2p + 1, j] (zero outside
/// k x n).
AMPRT_AMX void packBTile(View b, int64_t n, int64_t k, int64_t jt, int64_t kc, uint16_t *t) {
  const int64_t j0 = jt * 16, k0 = kc * 32, kn = std::min<int64_t>(32, k - k0);
  if (b.s1 == 1) { // rows of b: pairs of rows interleaved
    const int64_t jn = std::min<int64_t>(16, n - j0);
    for (int p = 0; p < 16; ++p) {
      int64_t ka = k0 + 2 * p;
      _mm512_storeu_si512(t + p * 32,
                          pairs16(ka < k ? b.p + ka * b.s0 + j0 : nullptr,
                                  ka + 1 < k ? b.p + (ka + 1) * b.s0 + j0 : nullptr, jn));
    }
    return;
  }
  if (b.s0 == 1) { // b stored by columns (b^T's rows): the pairs are words
    __m512i v[16];
    for (int q = 0; q < 16; ++q)
      v[q] = j0 + q < n ? load32(b.p + (j0 + q) * b.s1 + k0, kn) : _mm512_setzero_si512();
    transpose16x16(v);
    for (int p = 0; p < 16; ++p)
      _mm512_storeu_si512(t + p * 32, v[p]);
    return;
  }
  for (int p = 0; p < 16; ++p)
    for (int q = 0; q < 16; ++q)
      for (int e = 0; e < 2; ++e) {
        int64_t kk = 2 * p + e;
        t[(p * 16 + q) * 2 + e] = kk < kn && j0 + q < n ? b.at(k0 + kk, j0 + q) : 0;
      }
}

/// Tile register r (0 to 3) stored at p, rows stride bytes apart (the
/// register's number is part of the instruction).
AMPRT_AMX inline void storeRegister(int r, float *p, int64_t stride) {
  switch (r) {
  case 0:
    _tile_stored(0, p, stride);
    break;
  case 1:
    _tile_stored(1, p, stride);
    break;
  case 2:
    _tile_stored(2, p, stride);
    break;
  default:
    _tile_stored(3, p, stride);
    break;
  }
}

/// Rows [0, rows) of a 16-column block of f32 at p (row stride ld
/// elements), columns `cols` only: whether any is an inf or NaN (the
/// exponent's bits all ones), as the inf check reads them.
AMPRT_AMX inline uint32_t nonFiniteBlock(const float *p, int64_t ld, int64_t rows, __mmask16 cols) {
  const __m512i e = _mm512_set1_epi32(0x7f800000);
  __mmask16 any = 0;
  for (int64_t i = 0; i < rows; ++i) {
    __m512i v = _mm512_maskz_loadu_epi32(cols, p + i * ld);
    any |= _mm512_mask_cmpeq_epi32_mask(cols, _mm512_and_si512(v, e), e);
  }
  return any != 0;
}

/// The 16 x 16 tile of c at (it, jt) from tile register r: stored in place
/// when whole, else through a buffer, its part inside m x n. With check,
/// returns whether that part holds an inf or NaN (read while it is in L1).
AMPRT_AMX inline uint32_t storeTile(int r, float *c, int64_t ldc, int64_t m, int64_t n, int64_t it,
                                    int64_t jt, bool stream, bool check) {
  const int64_t i0 = it * 16, j0 = jt * 16;
  if (stream && i0 + 16 <= m && j0 + 16 <= n) {
    // Past the caches (amxProduct decides): through a buffer in L1, each
    // row one streaming store of its 64 bytes (the tile store has no such
    // form), so that the result's lines are not read first.
    alignas(64) float t[256];
    storeRegister(r, t, 64);
    for (int i = 0; i < 16; ++i)
      _mm512_stream_ps(c + (i0 + i) * ldc + j0, _mm512_load_ps(t + i * 16));
    return check ? nonFiniteBlock(t, 16, 16, 0xFFFF) : 0;
  }
  if (i0 + 16 <= m && j0 + 16 <= n) {
    storeRegister(r, c + i0 * ldc + j0, ldc * 4);
    return check ? nonFiniteBlock(c + i0 * ldc + j0, ldc, 16, 0xFFFF) : 0;
  }
  alignas(64) float tmp[256];
  storeRegister(r, tmp, 64);
  const int64_t rows = std::min<int64_t>(16, m - i0), cols = std::min<int64_t>(16, n - j0);
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(c + (i0 + i) * ldc + j0, tmp + i * 16, (size_t)cols * sizeof(float));
  return check ? nonFiniteBlock(tmp, 16, rows, (__mmask16)((1u << cols) - 1)) : 0;
}

/// Tiles of c for rows of tiles [t0, t1) (one k-chunk: a's tile kept over
/// the row, each tile of c summed once and stored).
AMPRT_AMX uint32_t computeRows(const uint16_t *ap, const uint16_t *bp, int64_t nt, int64_t m,
                               int64_t n, float *c, int64_t ldc, int64_t t0, int64_t t1,
                               bool stream, bool check) {
  uint32_t bad = 0;
  TileConfig cfg;
  _tile_loadconfig(&cfg);
  for (int64_t it = t0; it < t1; ++it) {
    _tile_loadd(4, ap + it * kTile, 64);
    for (int64_t jt = 0; jt < nt; ++jt) {
      _tile_zero(0);
      _tile_loadd(6, bp + jt * kTile, 64);
      _tile_dpbf16ps(0, 4, 6);
      bad |= storeTile(0, c, ldc, m, n, it, jt, stream, check);
    }
  }
  _tile_release();
  if (stream)
    _mm_sfence(); // the streamed stores before the join that publishes them
  return bad;
}

/// Where the tiles of a are read: packed (ap, tile (it, q) at (it * kc + q)
/// tiles, 64 bytes a row), or in place in a row-major a (rows of tile it
/// from row 16 it, its 32 columns from 32 q, lda elements a row): a's
/// weight-sized copy saved where a is a convolution's weights.
struct ATiles {
  const uint16_t *p;
  int64_t rowBlock, chunk, strideBytes;
  bool inPlace;
  const uint16_t *at(int64_t it, int64_t q) const { return p + it * rowBlock + q * chunk; }
};

/// Tiles of c two by two (pairs [p0, p1) of the mp x np pairs; more than
/// one k-chunk: each a and b tile loaded serves two products).
AMPRT_AMX uint32_t computePairs(ATiles a, const uint16_t *bp, int64_t mt, int64_t nt, int64_t kc,
                                int64_t np, int64_t m, int64_t n, float *c, int64_t ldc, int64_t p0,
                                int64_t p1, const uint16_t *zeros, bool stream, bool check) {
  uint32_t bad = 0;
  TileConfig cfg;
  _tile_loadconfig(&cfg);
  // In place, a's rows are read 64 bytes at a time from 32 rows at once:
  // each row's next lines are asked for ahead (the hardware prefetchers
  // follow fewer streams than that).
  constexpr int64_t kAhead = 8;
  for (int64_t pr = p0; pr < p1; ++pr) {
    const int64_t i0 = 2 * (pr / np), j0 = 2 * (pr % np);
    const bool i1 = i0 + 1 < mt, j1 = j0 + 1 < nt;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t q = 0; q < kc; ++q) {
      if (a.inPlace && q + kAhead < kc)
        for (int r = 0; r < (i1 ? 32 : 16); ++r)
          _mm_prefetch(reinterpret_cast<const char *>(a.at(i0, q + kAhead)) + r * a.strideBytes,
                       _MM_HINT_T0);
      _tile_loadd(4, a.at(i0, q), a.strideBytes);
      _tile_loadd(5, i1 ? a.at(i0 + 1, q) : zeros, i1 ? a.strideBytes : 64);
      _tile_loadd(6, bp + (j0 * kc + q) * kTile, 64);
      _tile_loadd(7, j1 ? bp + ((j0 + 1) * kc + q) * kTile : zeros, 64);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(1, 4, 7);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
    bad |= storeTile(0, c, ldc, m, n, i0, j0, stream, check);
    if (j1)
      bad |= storeTile(1, c, ldc, m, n, i0, j0 + 1, stream, check);
    if (i1)
      bad |= storeTile(2, c, ldc, m, n, i0 + 1, j0, stream, check);
    if (i1 && j1)
      bad |= storeTile(3, c, ldc, m, n, i0 + 1, j0 + 1, stream, check);
  }
  _tile_release();
  if (stream)
    _mm_sfence(); // the streamed stores before the join that publishes them
  return bad;
}

} // namespace

AMPRT_AVX512_QUIET_END

bool amprt::amxProductAvailable() {
  static const bool ok = [] {
    const char *off = std::getenv("AMPRT_NO_AMX");
    if ((off && *off && std::strcmp(off, "0") != 0) || !haveAvx512bw() ||
        !__builtin_cpu_supports("avx512vl"))
      return false;
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
      return false;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) // AMX-BF16, AMX-TILE
      return false;
    // Linux gives a process the tile registers' state on request
    // (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA; oneDNN asks too).
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
  }();
  return ok;
}

namespace {
/// amxProduct with b's tiles made by packB(jt, q, tile): tile (jt, q) of
/// b's column tiles and k-chunks, in TDPBF16PS's pairs, zero outside k x n.
template <typename PackB>
void productWith(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t a0, int64_t a1,
                 PackB packB, float *c, int64_t ldc, bool *nonFinite, bool aInPlaceOk = true) {
  if (nonFinite)
    *nonFinite = false;
  if (m <= 0 || n <= 0)
    return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  const int64_t mt = (m + 15) / 16, nt = (n + 15) / 16, kc = (k + 31) / 32;
  // A row-major a of whole tiles is read in place (no copy) where the sum
  // is long: computePairs reads each of its tiles once per pair of b's
  // column tiles.
  const bool inPlace = aInPlaceOk && a1 == 1 && amxReadsAInPlace(m, k);
  thread_local std::vector<uint16_t> aBuf, bBuf;
  uint16_t *ap = inPlace ? nullptr : grown(aBuf, (size_t)(mt * kc * kTile));
  uint16_t *bp = grown(bBuf, (size_t)(nt * kc * kTile));
  const View av{a, a0, a1};
  const int64_t aTiles = inPlace ? 0 : mt * kc;
  // (ap, bp: the calling thread's buffers, written and read by the threads below.)
  parallelFor(aTiles + nt * kc, 8, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (t < aTiles)
        packATile(av, m, k, t / kc, t % kc, ap + t * kTile);
      else
        packB((t - aTiles) / kc, (t - aTiles) % kc, bp + (t - aTiles) * kTile);
    }
  });
  // A result larger than the caches hold for it (a late layer's weight
  // gradient: 9.4 MB for resnet18's 512 x 512 x 3 x 3) is written past
  // them: its lines are not read first, and it is read again only by the
  // update (and the inf check, where not checked here), after other
  // weight-sized passes (12 such
  // [512 x 4608] results written, then checked: 1.57 -> 1.44 ms each in a
  // busy period, 1.05 -> 0.99 in a quiet one; the product alone 0.53-0.62
  // -> 0.50-0.53).
  const bool stream = m * n * (int64_t)sizeof(float) >= (int64_t(4) << 20) &&
                      reinterpret_cast<uintptr_t>(c) % 64 == 0 && ldc % 16 == 0;
  // The inf check of each tile as it is stored (nonFinite): an OR, the
  // same whatever the split.
  const bool check = nonFinite != nullptr;
  std::atomic<uint32_t> bad{0};
  if (kc == 1) {
    parallelFor(mt, 1, 1, [&](int64_t t0, int64_t t1) {
      if (computeRows(ap, bp, nt, m, n, c, ldc, t0, t1, stream, check))
        bad.store(1, std::memory_order_relaxed);
    });
    if (check)
      *nonFinite = bad.load() != 0;
    return;
  }
  const ATiles at =
      inPlace ? ATiles{a, 16 * a0, 32, a0 * 2, true} : ATiles{ap, kc * kTile, kTile, 64, false};
  static const uint16_t zeros[kTile] = {};
  const int64_t np = (nt + 1) / 2, pairs = ((mt + 1) / 2) * np;
  parallelFor(pairs, 1, 1, [&](int64_t p0, int64_t p1) {
    if (computePairs(at, bp, mt, nt, kc, np, m, n, c, ldc, p0, p1, zeros, stream, check))
      bad.store(1, std::memory_order_relaxed);
  });
  if (check)
    *nonFinite = bad.load() != 0;
}
} // namespace

void amprt::amxProduct(int64_t m, int64_t n, int64_t k, const uint16_t *a, int64_t a0, int64_t a1,
                       const uint16_t *b, int64_t b0, int64_t b1, float *c, int64_t ldc,
                       bool *nonFinite) {
  const View bv{b, b0, b1};
  productWith(
      m, n, k, a, a0, a1,
      [&](int64_t jt, int64_t q, uint16_t *t) { packBTile(bv, n, k, jt, q, t); }, c, ldc,
      nonFinite);
}

AMPRT_AVX512_QUIET_BEGIN // (see internal.h)
namespace {

/// The im2col columns of a 2-D convolution's input x [N, C, H, W] (bf16;
/// column stride 1 or 2, dilation 1), as b of the weight gradient's
/// product: b[p][j] = x[n, c, oh sH - padT + kh, ow sW - padL + kw] for the
/// output position p = (n, oh, ow) and the weight's index j = (c, kh, kw),
/// 0 outside x. Each k-chunk of 32 positions is a few runs of one (n, oh),
/// and a run of a column j is one masked load from a row of x (stride 2:
/// two, and a permute).
struct ConvColumns {
  const uint16_t *x;
  int64_t K, taps; // taps: KH x KW
  bool stride2;    // column stride 2 (else 1)
  // Per run r of a chunk (runs[first[q]] .. runs[first[q + 1]]) and tap
  // (kh, kw): the lanes it fills (0: the run's row lies outside x) and,
  // less the channel's offset, with column stride 1 the address that lane
  // 0 would read; with stride 2 the address of the first element read,
  // which 64-element window of the row is read (src), and the first lane
  // filled (first: lane first + u takes element 2u of the window).
  struct Load {
    uint32_t lanes;
    int64_t at;
    uint64_t src = 0;
    int32_t first = 0;
  };
  std::vector<Load> loads;        // [run][tap]
  std::vector<size_t> first;      // per chunk, its first run; one past the last at the end
  std::vector<int64_t> chan, tap; // per column j = (c, kh, kw): c x H x W, kh x KW + kw
};

/// b's tile (jt, q) from x (as packBTile's b stored by columns: 16 columns
/// j of 32 positions each, transposed into the pairs).
AMPRT_AMX void buildColumnsTile(const ConvColumns &cc, int64_t jt, int64_t q, uint16_t *t) {
  __m512i v[16];
  const size_t r0 = cc.first[(size_t)q], r1 = cc.first[(size_t)q + 1];
  for (int r = 0; r < 16; ++r) {
    const int64_t j = jt * 16 + r;
    __m512i acc = _mm512_setzero_si512();
    if (j < cc.K) {
      const uint16_t *xc = cc.x + cc.chan[(size_t)j];
      const ConvColumns::Load *l = cc.loads.data() + r0 * cc.taps + cc.tap[(size_t)j];
      if (!cc.stride2) {
        for (size_t run = r0; run < r1; ++run, l += cc.taps) // (masked-out lanes are not read)
          acc = _mm512_mask_loadu_epi16(acc, (__mmask32)l->lanes, xc + l->at);
      } else {
        const __m512i iota =
            _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14,
                             13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        for (size_t run = r0; run < r1; ++run, l += cc.taps) {
          if (!l->lanes)
            continue;
          // The window's 64 elements (those read inside the row), the
          // even ones moved to the run's lanes.
          __m512i lo = _mm512_maskz_loadu_epi16((__mmask32)l->src, xc + l->at);
          __m512i hi = _mm512_maskz_loadu_epi16((__mmask32)(l->src >> 32), xc + l->at + 32);
          __m512i idx =
              _mm512_slli_epi16(_mm512_sub_epi16(iota, _mm512_set1_epi16((short)l->first)), 1);
          acc = _mm512_mask_mov_epi16(acc, (__mmask32)l->lanes,
                                      _mm512_permutex2var_epi16(lo, idx, hi));
        }
      }
    }
    v[r] = acc;
  }
  transpose16x16(v);
  for (int p = 0; p < 16; ++p)
    _mm512_storeu_si512(t + p * 32, v[p]);
}

} // namespace
AMPRT_AVX512_QUIET_END

void amprt::amxConvWeightGrad(const uint16_t *x, int64_t N, int64_t C, int64_t H, int64_t W,
                              int64_t KH, int64_t KW, int64_t strideH, int64_t strideW,
                              int64_t padT, int64_t padL, int64_t OH, int64_t OW,
                              const uint16_t *dyt, int64_t oc, float *dw, bool *nonFinite) {
  const int64_t P = N * OH * OW, K = C * KH * KW, kc = (P + 31) / 32;
  // (The calling thread's tables, read by the threads through cc: a
  // thread_local named in the lambda would be each thread's own.)
  thread_local ConvColumns tables;
  ConvColumns &cc = tables;
  cc.x = x;
  cc.K = K;
  cc.taps = KH * KW;
  cc.stride2 = strideW == 2;
  cc.chan.resize((size_t)K);
  cc.tap.resize((size_t)K);
  for (int64_t j = 0; j < K; ++j) {
    cc.chan[(size_t)j] = j / cc.taps * H * W;
    cc.tap[(size_t)j] = j % cc.taps;
  }
  cc.loads.clear();
  cc.first.assign((size_t)kc + 1, 0);
  size_t runs = 0;
  for (int64_t q = 0; q < kc; ++q) {
    cc.first[(size_t)q] = runs;
    for (int64_t p = q * 32; p < std::min(P, q * 32 + 32);) {
      const int64_t n = p / (OH * OW), oh = p / OW % OH, ow = p % OW;
      const int64_t len = std::min({OW - ow, q * 32 + 32 - p, P - p}), dst = p - q * 32;
      for (int64_t kh = 0; kh < KH; ++kh)
        for (int64_t kw = 0; kw < KW; ++kw) {
          // Lane dst + u takes x[n, c, ih, iw0 + s u] for u in [lo, hi):
          // the run's positions whose tap lies inside x.
          const int64_t s = strideW, ih = oh * strideH - padT + kh, iw0 = ow * s - padL + kw;
          const int64_t lo = std::max<int64_t>(0, (-iw0 + s - 1) / s),
                        hi = std::min<int64_t>(len, (W - 1 - iw0) / s + 1);
          ConvColumns::Load l{0, 0};
          if (ih >= 0 && ih < H && W - 1 - iw0 >= 0 && lo < hi) {
            l.lanes = (uint32_t)((((uint64_t(1) << hi) - 1) & ~((uint64_t(1) << lo) - 1)) << dst);
            const int64_t row = (n * C * H + ih) * W;
            if (s == 1) {
              l.at = row + iw0 - dst;
            } else { // elements 0, 2, ..., 2 (hi - lo - 1) from the first one read
              l.at = row + iw0 + s * lo;
              const int64_t span = 2 * (hi - lo) - 1; // at most 63
              l.src = span >= 64 ? ~uint64_t(0) : (uint64_t(1) << span) - 1;
              l.first = (int32_t)(dst + lo);
            }
          }
          cc.loads.push_back(l);
        }
      ++runs;
      p += len;
    }
  }
  cc.first[(size_t)kc] = runs;
  // dy's rows packed, not read in place: rows P elements apart (4 KiB for
  // resnet18's layer1) would share L1 sets.
  productWith(
      oc, K, P, dyt, P, 1,
      [&](int64_t jt, int64_t q, uint16_t *t) { buildColumnsTile(cc, jt, q, t); }, dw, K, nonFinite,
      false);
}

#else // no AMX code for this target

bool amprt::amxProductAvailable() { return false; }

void amprt::amxProduct(int64_t, int64_t, int64_t, const uint16_t *, int64_t, int64_t,
                       const uint16_t *, int64_t, int64_t, float *, int64_t, bool *) {}

void amprt::amxConvWeightGrad(const uint16_t *, int64_t, int64_t, int64_t, int64_t, int64_t,
                              int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                              const uint16_t *, int64_t, float *, bool *) {}

#endif
