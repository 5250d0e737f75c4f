/*===- amprt_io.h - checkpoints, arrays and metrics of libamprt ---*- C -*-===*
 *
 * Part of the C API of amprt.h (which includes it): the files a training
 * run reads and writes.
 *
 *===----------------------------------------------------------------------===*/

#ifndef AMPRT_AMPRT_IO_H
#define AMPRT_AMPRT_IO_H

#include "amprt/amprt.h"

#ifdef __cplusplus
extern "C" {
#endif

/*--- Checkpoints (safetensors) -----------------------------------------------*
 * One file: the tensors by name, and string metadata (loss-scale state, step
 * count, RNG state, anything the caller adds). Written to a temporary file in
 * the same folder and renamed, so a crash never leaves half a checkpoint. */

typedef struct amprt_named_tensor {
  const char *name;
  amprt_tensor tensor;
} amprt_named_tensor;

/* The metadata keys of a program's weights file (written by amp-compile)
   and of a training checkpoint (written by the program), declared once. */
#define AMPRT_META_SIGNATURE "amp.signature"         /* the program's arguments and results */
#define AMPRT_META_ARENA_BYTES "amp.arena_bytes"     /* its planned arena */
#define AMPRT_META_PRECISION "amp.precision"         /* fp32 | fp16 | bf16 */
#define AMPRT_META_MODEL "amp.model"                 /* the model file it was compiled from */
#define AMPRT_META_DEVICE "amp.device"               /* cpu | cuda */
#define AMPRT_META_TRAINING "amp.training"           /* the optimizer, for a training step */
#define AMPRT_META_DATA_PARALLEL "amp.data_parallel" /* present: compiled for data parallel */
#define AMPRT_META_STEPS_DONE "amp.steps_done"       /* a checkpoint's step */
#define AMPRT_META_SKIPPED_TOTAL "amp.skipped_total" /* its skipped steps so far */
#define AMPRT_META_RNG_STATE "amp.rng_state"         /* its dropout generator (hex) */

typedef struct amprt_metadata {
  const char *key;
  const char *value;
} amprt_metadata;

amprt_status amprt_checkpoint_save(const char *path, const amprt_named_tensor *tensors, int32_t n,
                                   const amprt_metadata *meta, int32_t nmeta);

typedef struct amprt_checkpoint amprt_checkpoint;

/* Opens and validates a checkpoint (header, offsets, sizes): a truncated
 * or foreign file is AMPRT_ERR_FORMAT naming the problem. */
amprt_status amprt_checkpoint_open(const char *path, amprt_checkpoint **out);
void amprt_checkpoint_close(amprt_checkpoint *ck);
/* Copies the tensor `name` into `dst`, whose dtype and shape must match. */
amprt_status amprt_checkpoint_read(amprt_checkpoint *ck, const char *name, amprt_tensor *dst);
/* The metadata value for `key` or NULL. */
const char *amprt_checkpoint_metadata(amprt_checkpoint *ck, const char *key);
int32_t amprt_checkpoint_count(amprt_checkpoint *ck);
const char *amprt_checkpoint_name(amprt_checkpoint *ck, int32_t i);
/* The dtype and shape of the tensor `name` (the shape as amprt_array holds
 * it): AMPRT_ERR_FORMAT when there is no such tensor. */
amprt_status amprt_checkpoint_info(amprt_checkpoint *ck, const char *name, amprt_dtype *dtype,
                                   int32_t *rank, int64_t shape[AMPRT_MAX_RANK]);

/*--- .npy / .npz arrays -------------------------------------------------------*
 * What numpy's np.save / np.savez / np.savez_compressed write (bare .npy is
 * one array named after the file). Float32, float16, bool and little-endian
 * integers; C order. */

typedef struct amprt_array {
  const void *data; /* owned by the amprt_npz */
  amprt_dtype dtype;
  int32_t rank;
  int64_t shape[AMPRT_MAX_RANK];
} amprt_array;

typedef struct amprt_npz amprt_npz;

amprt_status amprt_npz_open(const char *path, amprt_npz **out);
void amprt_npz_close(amprt_npz *z);
int32_t amprt_npz_count(const amprt_npz *z);
const char *amprt_npz_name(const amprt_npz *z, int32_t i);
/* NULL when there is no array of that name. */
const amprt_array *amprt_npz_get(const amprt_npz *z, const char *name);
/* Writes an uncompressed .npz (temporary file + rename). */
amprt_status amprt_npz_write(const char *path, const char *const *names, const amprt_array *arrays,
                             int32_t n);

/* Copies an input array into a program's buffer of type dtype and shape
 * (rank, shape): the shape must match; f32 / f16 / bf16 convert into each
 * other (rounding to nearest even); uint16 data fills bf16 buffers as bit
 * patterns; other types must match exactly. `what` names the input in
 * messages. */
amprt_status amprt_feed(const amprt_array *src, amprt_dtype dtype, int32_t rank,
                        const int64_t *shape, void *dst, const char *what);

/* Number of NaN / inf values among n floats of type t (0 for other types);
 * *first receives the first one's index (or -1). */
int64_t amprt_count_nonfinite(const void *data, amprt_dtype t, int64_t n, int64_t *first);

/*--- Metrics -----------------------------------------------------------------*/

typedef struct amprt_metrics amprt_metrics;

typedef struct amprt_step_metrics {
  int64_t step;
  double loss;
  double loss_scale;
  int32_t found_inf;
  int64_t skipped_total;
  double step_time_s;
} amprt_step_metrics;

/* JSON-lines writer: one object per step, flushed each line. append != 0
 * keeps existing lines (resumed runs). */
amprt_status amprt_metrics_open(const char *path, int append, amprt_metrics **out);
amprt_status amprt_metrics_write(amprt_metrics *m, const amprt_step_metrics *s);
void amprt_metrics_close(amprt_metrics *m);
/* "step 120/200  loss 1.2345  scale 65536  skipped 3  12.3 ms/step" */
int amprt_format_progress(char *buf, size_t size, const amprt_step_metrics *s, int64_t total_steps);

#ifdef __cplusplus
}
#endif

#endif /* AMPRT_AMPRT_IO_H */
