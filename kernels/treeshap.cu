// Path-dependent TreeSHAP on packed paths, one warp per bin of paths (after GPUTreeShap,
// Mitchell et al. 2022). Compiled at run time by NVRTC (src/gpu/engine.rs); the same steps are
// simulated lane by lane on the CPU in src/gpu/warps.rs, which the tests hold to the exact
// engine: keep the two in step.
//
// Layout (built by WarpProgram in src/gpu/warps.rs):
//   lane_ints  [bins*32][8]: feature (-1 root, -2 idle), group, start lane of the path, rank on
//                            the path, path length, split range begin, end, unused
//   lane_reals [bins*32][2]: zero fraction, path value (leaf value x tree weight)
//   bin_len    [bins]      : longest path of the bin (uniform loop bound of its warp)
//   split_thresholds [splits], split_ints [splits][4]: category begin, category words, flags
//   categories [words]     : category bitsets
//   x          [rows][cols]: feature values, NaN = missing
//   out        [rows][G][F+1] (SHAP) or [rows][G][F+1][F+1] (interaction pairs), zeroed by the
//              host; the bias and the interaction diagonal are filled in by the host.
//
// Work split: blockIdx.x takes `rows_per_block` rows, blockIdx.y a slice of the bins; each warp
// of the block walks its share of the slice's bins over those rows. Sums go to a shared-memory
// accumulator when it fits (`use_shared`), then once to global memory with atomics.

#define LANES 32
#define FULL_MASK 0xffffffffu
#define LANE_INTS 8
#define LANE_REALS 2
#define SPLIT_INTS 4
#define IDLE_LANE (-2)

#define RULE_XGB_LESS 0u
#define RULE_XGB_CATEGORIES 1u
#define RULE_LGB_LESS_EQUAL 2u
#define RULE_LGB_CATEGORIES 3u
#define MISSING_ZERO 1u
#define MISSING_NAN 2u
#define DEFAULT_LEFT (1u << 4)
#define TAKE_LEFT (1u << 5)

struct Lane {
  int feature, group, start, rank, len, split_begin, split_end;
  double zero, value;
};

__device__ __forceinline__ Lane load_lane(const int* lane_ints, const double* lane_reals, long slot) {
  const int* i = lane_ints + slot * LANE_INTS;
  Lane l;
  l.feature = i[0];
  l.group = i[1];
  l.start = i[2];
  l.rank = i[3];
  l.len = i[4];
  l.split_begin = i[5];
  l.split_end = i[6];
  l.zero = lane_reals[slot * LANE_REALS];
  l.value = lane_reals[slot * LANE_REALS + 1];
  return l;
}

__device__ __forceinline__ bool in_category_set(const unsigned* categories, unsigned begin, unsigned words, unsigned code) {
  unsigned word = code / 32u;
  return word < words && ((categories[begin + word] >> (code % 32u)) & 1u) == 1u;
}

// Whether value x follows split s the way the path does (Model::goes_left == take_left).
__device__ bool follows(const double* thresholds, const unsigned* split_ints, const unsigned* categories, int s, double x) {
  const unsigned begin = split_ints[s * SPLIT_INTS];
  const unsigned words = split_ints[s * SPLIT_INTS + 1];
  const unsigned flags = split_ints[s * SPLIT_INTS + 2];
  const double threshold = thresholds[s];
  const bool default_left = (flags & DEFAULT_LEFT) != 0u;
  bool left;
  switch (flags & 3u) {
    case RULE_XGB_LESS:
      left = isnan(x) ? default_left : (x < threshold);
      break;
    case RULE_XGB_CATEGORIES:
      // Invalid codes (negative, too large) go left like any category not in the set.
      if (isnan(x)) left = default_left;
      else if (!(x >= 0.0 && x < 16777216.0)) left = true;
      else left = !in_category_set(categories, begin, words, (unsigned)x);
      break;
    case RULE_LGB_LESS_EQUAL: {
      const unsigned missing = (flags >> 2) & 3u;
      double v = (isnan(x) && missing != MISSING_NAN) ? 0.0 : x;
      bool is_missing = (missing == MISSING_ZERO) ? (v >= -1e-35 && v <= 1e-35)
                        : (missing == MISSING_NAN) ? isnan(v) : false;
      left = is_missing ? default_left : (v <= threshold);
      break;
    }
    default: {
      // LightGBM categorical: NaN, out-of-range and negative codes go right.
      double code = trunc(x);
      if (isnan(x) || x >= 2147483648.0 || x <= -2147483649.0 || code < 0.0) left = false;
      else left = in_category_set(categories, begin, words, (unsigned)code);
      break;
    }
  }
  return left == ((flags & TAKE_LEFT) != 0u);
}

__device__ __forceinline__ double one_fraction(const Lane& l, const double* row, const double* thresholds,
                                               const unsigned* split_ints, const unsigned* categories) {
  if (l.feature < 0) return 1.0;
  const double v = row[l.feature];
  for (int s = l.split_begin; s < l.split_end; ++s)
    if (!follows(thresholds, split_ints, categories, s, v)) return 0.0;
  return 1.0;
}

// EXTEND every path of the warp by all its elements; returns this lane's permutation weight.
// At step d each lane reads its path's element d and its left neighbour's weight.
__device__ __forceinline__ double extend_paths(const Lane& l, double zero, double one, int max_len) {
  const int lane = threadIdx.x % LANES;
  double w = (l.rank == 0) ? 1.0 : 0.0;
  for (int d = 1; d < max_len; ++d) {
    const int src = (d < l.len) ? l.start + d : lane;
    const double z = __shfl_sync(FULL_MASK, zero, src);
    const double o = __shfl_sync(FULL_MASK, one, src);
    double left = __shfl_up_sync(FULL_MASK, w, 1);
    if (l.rank == 0) left = 0.0;
    if (d < l.len) w = (w * z * (double)(d - l.rank) + left * o * (double)l.rank) / (double)(d + 1);
  }
  return w;
}

// UNWOUNDSUM of this lane's own element: the path's total permutation weight with the element
// removed. The loop bound is uniform across the warp so every lane joins every shuffle.
__device__ __forceinline__ double unwound_sum(const Lane& l, double zero, double one, double w, int max_len) {
  const int depth = l.len - 1;
  double next = __shfl_sync(FULL_MASK, w, l.start + depth);
  double total = 0.0;
  for (int i = max_len - 2; i >= 0; --i) {
    const double wi = __shfl_sync(FULL_MASK, w, l.start + min(i, depth));
    if (i < depth) {
      if (one != 0.0) {
        const double tmp = next / ((double)(i + 1) * one);
        total += tmp;
        next = wi - tmp * zero * (double)(depth - i);
      } else {
        total += wi / (zero * (double)(depth - i));
      }
    }
  }
  return total * (double)(depth + 1);
}

// The rows and bins one block takes, and where its sums go.
struct BlockWork {
  long first;      // first row of the block
  int n_rows;      // rows of the block
  int bin_begin;   // this warp's first bin (step: warps per block)
  int bin_end;     // end of the block's slice of bins
  double* acc;     // the shared accumulator, or the block's rows of `out`
};

// Sets up a block's work; false when the block has no rows. Clears the shared accumulator.
__device__ bool begin_block(BlockWork& work, double* shared, double* out, int width, long rows, int rows_per_block,
                            int bins, int use_shared) {
  work.first = (long)blockIdx.x * rows_per_block;
  work.n_rows = (int)min((long)rows_per_block, rows - work.first);
  if (work.n_rows <= 0) return false;
  if (use_shared) {
    for (int i = threadIdx.x; i < work.n_rows * width; i += blockDim.x) shared[i] = 0.0;
    __syncthreads();
  }
  work.acc = use_shared ? shared : out + work.first * width;
  const int slice = (bins + gridDim.y - 1) / gridDim.y;
  work.bin_begin = blockIdx.y * slice + threadIdx.x / LANES;
  work.bin_end = min(bins, (int)(blockIdx.y + 1) * slice);
  return true;
}

// Adds the block's shared accumulator into `out` once every warp is done.
__device__ void end_block(const BlockWork& work, const double* shared, double* out, int width, int use_shared) {
  if (!use_shared) return;
  __syncthreads();
  for (int i = threadIdx.x; i < work.n_rows * width; i += blockDim.x)
    if (shared[i] != 0.0) atomicAdd(out + work.first * width + i, shared[i]);
}

extern "C" __global__ void shap_kernel(const int* lane_ints, const double* lane_reals, const int* bin_len, int bins,
                                       const double* thresholds, const unsigned* split_ints, const unsigned* categories,
                                       const double* x, long rows, int cols, int groups, int rows_per_block,
                                       int use_shared, double* out) {
  extern __shared__ double acc_shared[];
  const int features = cols;
  const int width = groups * (features + 1);
  BlockWork work;
  if (!begin_block(work, acc_shared, out, width, rows, rows_per_block, bins, use_shared)) return;
  const int lane = threadIdx.x % LANES;
  for (int b = work.bin_begin; b < work.bin_end; b += blockDim.x / LANES) {
    const Lane l = load_lane(lane_ints, lane_reals, (long)b * LANES + lane);
    const int max_len = bin_len[b];
    for (int r = 0; r < work.n_rows; ++r) {
      const double* row = x + (work.first + r) * cols;
      const double one = one_fraction(l, row, thresholds, split_ints, categories);
      const double w = extend_paths(l, l.zero, one, max_len);
      const double sum = unwound_sum(l, l.zero, one, w, max_len);
      if (l.feature >= 0) {
        const double phi = sum * (one - l.zero) * l.value;
        if (phi != 0.0) atomicAdd(work.acc + r * width + l.group * (features + 1) + l.feature, phi);
      }
    }
  }
  end_block(work, acc_shared, out, width, use_shared);
}

// Off-diagonal SHAP interaction values: for each element c of a path, c becomes a null player
// (fractions 1, 1) and entry [c][i] gains half of (one_c - zero_c) times i's attribution.
extern "C" __global__ void interactions_kernel(const int* lane_ints, const double* lane_reals, const int* bin_len, int bins,
                                               const double* thresholds, const unsigned* split_ints, const unsigned* categories,
                                               const double* x, long rows, int cols, int groups, int rows_per_block,
                                               int use_shared, double* out) {
  extern __shared__ double acc_shared[];
  const int features = cols;
  const int w1 = features + 1;
  const int width = groups * w1 * w1;
  BlockWork work;
  if (!begin_block(work, acc_shared, out, width, rows, rows_per_block, bins, use_shared)) return;
  const int lane = threadIdx.x % LANES;
  for (int b = work.bin_begin; b < work.bin_end; b += blockDim.x / LANES) {
    const Lane l = load_lane(lane_ints, lane_reals, (long)b * LANES + lane);
    const int max_len = bin_len[b];
    for (int r = 0; r < work.n_rows; ++r) {
      const double* row = x + (work.first + r) * cols;
      const double one = one_fraction(l, row, thresholds, split_ints, categories);
      for (int c = 1; c < max_len; ++c) {
        const int src = (c < l.len) ? l.start + c : lane;
        const double zero_c = __shfl_sync(FULL_MASK, l.zero, src);
        const double one_c = __shfl_sync(FULL_MASK, one, src);
        const int feature_c = __shfl_sync(FULL_MASK, l.feature, src);
        const bool null_player = (l.rank == c);
        const double z = null_player ? 1.0 : l.zero;
        const double o = null_player ? 1.0 : one;
        const double w = extend_paths(l, z, o, max_len);
        const double sum = unwound_sum(l, z, o, w, max_len);
        if (l.feature >= 0 && c < l.len && !null_player) {
          const double v = 0.5 * sum * (o - z) * l.value * (one_c - zero_c);
          if (v != 0.0) atomicAdd(work.acc + r * width + l.group * w1 * w1 + feature_c * w1 + l.feature, v);
        }
      }
    }
  }
  end_block(work, acc_shared, out, width, use_shared);
}
