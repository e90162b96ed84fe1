// Path-dependent TreeSHAP on the paths of a model, in three formulations:
//   * the warp kernels (shap_kernel, interactions_kernel): one warp per bin of packed paths,
//     EXTEND and UNWOUNDSUM across lanes (after GPUTreeShap, Mitchell et al. 2022), for paths
//     of at most 32 elements;
//   * the row kernels (row_shap_kernel, row_interactions_kernel), the other layout of the
//     paths of at most 32 elements: one thread per row, every thread of a warp on the same path
//     (its loads are broadcasts, its loop bounds uniform), each path a Gauss-Legendre sum with
//     no division and no shuffle;
//   * the long-path quadrature kernels (quadrature_shap_kernel, quadrature_interactions_kernel):
//     one thread per (row, path), any path length, for the paths that do not fit a warp.
// Compiled at run time by NVRTC (src/gpu/engine.rs). tests/gpu_emulation.rs runs this file
// unchanged on the CPU under an emulation of CUDA and holds it to the exact engine; the warp
// kernels' steps are also simulated lane by lane in src/gpu/warps.rs: keep the two in step.
//
// Warp layout (built by PathProgram in src/gpu/warps.rs):
//   lane_ints  [bins*32][8]: feature (-1 root, -2 idle), group, start lane of the path, rank on
//                            the path, path length, split range begin, end, unused
//   lane_reals [bins*32][2]: zero fraction, path value (leaf value x tree weight)
//   bin_len    [bins]      : longest path of the bin (uniform loop bound of its warp)
//   split_thresholds [splits], split_ints [splits][4]: category begin, category words, flags
//   categories [words]     : category bitsets
//   x          [rows][cols]: feature values, NaN = missing
//   out        [rows][G][F+1] (SHAP) or [rows][G][F+1][F+1] (interaction pairs), zeroed by the
//              host; the bias and the interaction diagonal are filled in by the host. Both
//              kernels of a kind add into the same output.
//
// Long-path and row layout (src/gpu/quadrature.rs), paths sorted longest first:
//   path_ints    [paths][4]   : first element, element count, group, quadrature points
//   path_values  [paths]      : leaf value x tree weight
//   element_ints [elements][4]: feature (-1 root), split range begin, end, and (row kernels)
//                               the first of the element's scales
//   element_zero [elements]   : zero fraction
//   quadrature   [pairs][2]   : Gauss-Legendre nodes and weights on [0, 1]; the rule of m
//                               points starts at pair m(m-1)/2
//   tails        [pairs]      : (row kernels) 1 / (1 - node)
//   element_scales[...]       : (row kernels) m per element: (1 - z) / (z + t_k (1 - z))
//
// The row kernels' accumulator in shared memory is [width][rows_per_block] (a thread's row is
// a column: the threads of a warp touch consecutive words), and blockDim.x == rows_per_block.
// With use_shared 2 the block's rows follow it, [cols][rows_per_block], copied from `x` when
// the block starts; with 3 the accumulator is in global memory, the block's own region of
// [width][rows_per_block] after the output's `rows * width` values (blocks in order y, x),
// cleared by the block. The other kernels take use_shared as 0 or not.
//
// Work split: blockIdx.x takes `rows_per_block` rows, blockIdx.y a slice of the units (bins for
// the warp kernels, paths for the quadrature kernels); each warp of the block walks its share
// of the slice's bins over those rows, or each thread its share of the (row, path) pairs. Sums
// go to a shared-memory accumulator when it fits (`use_shared`), then once to global memory
// with atomics.

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
#define RULE_CATEGORIES_LEFT 4u
#define RULE_CATEGORIES_LEFT_EXACT 5u
#define RULE_BITS 7u
#define MISSING_SHIFT 3u
#define MISSING_ZERO 1u
#define MISSING_NAN 2u
#define DEFAULT_LEFT (1u << 5)
#define TAKE_LEFT (1u << 6)

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
  switch (flags & RULE_BITS) {
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
      const unsigned missing = (flags >> MISSING_SHIFT) & 3u;
      double v = (isnan(x) && missing != MISSING_NAN) ? 0.0 : x;
      bool is_missing = (missing == MISSING_ZERO) ? (v >= -1e-35 && v <= 1e-35)
                        : (missing == MISSING_NAN) ? isnan(v) : false;
      left = is_missing ? default_left : (v <= threshold);
      break;
    }
    case RULE_CATEGORIES_LEFT:
    case RULE_CATEGORIES_LEFT_EXACT:
      // A set that goes left (scikit-learn, Spark ML): NaN and negative values take the default
      // way; the exact rule (Spark) puts fractional values outside the set, the other truncates.
      if (isnan(x) || x < 0.0) left = default_left;
      else if (x >= 16777216.0 || ((flags & RULE_BITS) == RULE_CATEGORIES_LEFT_EXACT && x != trunc(x))) left = false;
      else left = in_category_set(categories, begin, words, (unsigned)x);
      break;
    case RULE_LGB_CATEGORIES:
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

// Whether the row follows every split of a path element (its one fraction is 1); the root
// element (feature < 0) is always followed. The row's feature f is row[f * stride]: 1 for a
// row of `x`, the block's rows for the rows the row kernels stage in shared memory.
__device__ __forceinline__ bool follows_element(int feature, int split_begin, int split_end, const double* row, int stride,
                                                const double* thresholds, const unsigned* split_ints,
                                                const unsigned* categories) {
  if (feature < 0) return true;
  const double v = row[(long)feature * stride];
  for (int s = split_begin; s < split_end; ++s)
    if (!follows(thresholds, split_ints, categories, s, v)) return false;
  return true;
}

__device__ __forceinline__ double one_fraction(const Lane& l, const double* row, const double* thresholds,
                                               const unsigned* split_ints, const unsigned* categories) {
  return follows_element(l.feature, l.split_begin, l.split_end, row, 1, thresholds, split_ints, categories) ? 1.0 : 0.0;
}

// 1/k for k = 1 .. LANES + 1 (entry 0 unused). The warp kernels multiply by these instead of
// dividing by small integers: a float64 division is a software sequence of about ten
// instructions on NVIDIA GPUs, and the EXTEND and UNWOUNDSUM loops do one per step and lane.
__device__ const double RECIPROCAL[LANES + 2] = {
    0.0,        1.0,        1.0 / 2.0,  1.0 / 3.0,  1.0 / 4.0,  1.0 / 5.0,  1.0 / 6.0,  1.0 / 7.0,  1.0 / 8.0,
    1.0 / 9.0,  1.0 / 10.0, 1.0 / 11.0, 1.0 / 12.0, 1.0 / 13.0, 1.0 / 14.0, 1.0 / 15.0, 1.0 / 16.0, 1.0 / 17.0,
    1.0 / 18.0, 1.0 / 19.0, 1.0 / 20.0, 1.0 / 21.0, 1.0 / 22.0, 1.0 / 23.0, 1.0 / 24.0, 1.0 / 25.0, 1.0 / 26.0,
    1.0 / 27.0, 1.0 / 28.0, 1.0 / 29.0, 1.0 / 30.0, 1.0 / 31.0, 1.0 / 32.0, 1.0 / 33.0};

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
    if (d < l.len) w = (w * z * (double)(d - l.rank) + left * o * (double)l.rank) * RECIPROCAL[d + 1];
  }
  return w;
}

// UNWOUNDSUM of this lane's own element: the path's total permutation weight with the element
// removed. The loop bound is uniform across the warp so every lane joins every shuffle. `one` is
// 0 or 1 (a row follows an element's splits or not; a null player's is 1), so dividing by
// (i + 1) * one is multiplying by 1 / (i + 1); with `one` 0 the sum's common factor 1 / zero is
// applied once, after the loop. An element no training cover reaches (zero 0) that the row does
// not follow (one 0) makes every weight of its path 0, so the path adds nothing: its own sum is
// 0 too, not 0 / 0 (CatBoost's depthwise trees have such branches).
__device__ __forceinline__ double unwound_sum(const Lane& l, double zero, double one, double w, int max_len) {
  const int depth = l.len - 1;
  double next = __shfl_sync(FULL_MASK, w, l.start + depth);
  double total = 0.0;
  for (int i = max_len - 2; i >= 0; --i) {
    const double wi = __shfl_sync(FULL_MASK, w, l.start + min(i, depth));
    if (i < depth) {
      if (one != 0.0) {
        const double tmp = next * RECIPROCAL[i + 1];
        total += tmp;
        next = wi - tmp * zero * (double)(depth - i);
      } else {
        total += wi * RECIPROCAL[depth - i];
      }
    }
  }
  if (one == 0.0) total = (zero == 0.0) ? 0.0 : total / zero;
  return total * (double)(depth + 1);
}

// The rows and bins one block takes, and where its sums go.
struct BlockWork {
  long first;       // first row of the block
  int n_rows;       // rows of the block
  int slice_begin;  // the block's slice of units (bins or long paths)
  int slice_end;
  double* acc;      // the shared accumulator, or the block's rows of `out`
};

// Sets up a block's work over `units` bins or paths; false when the block has no rows. Clears
// the shared accumulator.
__device__ bool begin_block(BlockWork& work, double* shared, double* out, int width, long rows, int rows_per_block,
                            int units, int use_shared) {
  work.first = (long)blockIdx.x * rows_per_block;
  work.n_rows = (int)min((long)rows_per_block, rows - work.first);
  if (work.n_rows <= 0) return false;
  if (use_shared) {
    for (int i = threadIdx.x; i < work.n_rows * width; i += blockDim.x) shared[i] = 0.0;
    __syncthreads();
  }
  work.acc = use_shared ? shared : out + work.first * width;
  const int slice = (units + gridDim.y - 1) / gridDim.y;
  work.slice_begin = min(units, (int)blockIdx.y * slice);
  work.slice_end = min(units, (int)(blockIdx.y + 1) * slice);
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
  for (int b = work.slice_begin + threadIdx.x / LANES; b < work.slice_end; b += blockDim.x / LANES) {
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
  for (int b = work.slice_begin + threadIdx.x / LANES; b < work.slice_end; b += blockDim.x / LANES) {
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

// ---------------------------------------------------------------------------------------------
// Quadrature kernels: any path length, one thread per (row, path).
//
// For a path of value v whose elements have zero fractions z_j and one fractions o_j (0 or 1
// for this row), element i's attribution is
//     phi_i = v (o_i - z_i) * integral over [0, 1] of prod_{j != i} (z_j + t (o_j - z_j)) dt,
// since |S|! (n - |S| - 1)! / n! = integral of t^|S| (1 - t)^(n - |S| - 1). The integrand is a
// polynomial of degree n - 1, so Gauss-Legendre with ceil(n / 2) points is exact; every term is
// non-negative, so the sum has no cancellation. A pair (i, c) is the same integral without both
// factors, times (o_c - z_c) / 2 (element c as a null player, as the warp kernel computes it).
// Each thread takes the quadrature points QUADRATURE_CHUNK at a time, so its registers and local
// memory do not grow with the path.

#define LONG_PATH_INTS 4
#define LONG_ELEMENT_INTS 4
#define QUADRATURE_CHUNK 32
// Most elements of a long path (the host refuses longer ones): one bit each in `ones`.
#define LONG_PATH_MAX_ELEMENTS 544
#define LONG_PATH_WORDS (LONG_PATH_MAX_ELEMENTS / 32)

struct LongPath {
  int first, len, group, points;
  double value;
};

__device__ __forceinline__ LongPath load_long_path(const int* path_ints, const double* path_values, int p) {
  const int* i = path_ints + (long)p * LONG_PATH_INTS;
  LongPath path;
  path.first = i[0];
  path.len = i[1];
  path.group = i[2];
  path.points = i[3];
  path.value = path_values[p];
  return path;
}

// Bit j of `ones`: whether the row follows element j's splits.
__device__ void long_path_ones(const LongPath& path, const int* element_ints, const double* row, const double* thresholds,
                               const unsigned* split_ints, const unsigned* categories, unsigned* ones) {
  for (int w = 0; w < LONG_PATH_WORDS; ++w) ones[w] = 0u;
  for (int j = 0; j < path.len; ++j) {
    const int* e = element_ints + (long)(path.first + j) * LONG_ELEMENT_INTS;
    if (follows_element(e[0], e[1], e[2], row, 1, thresholds, split_ints, categories)) ones[j / 32] |= 1u << (j % 32);
  }
}

__device__ __forceinline__ double one_bit(const unsigned* ones, int j) {
  return ((ones[j / 32] >> (j % 32)) & 1u) ? 1.0 : 0.0;
}

// weighted[k] = w_k * prod_j (z_j + t_k (o_j - z_j)) for the chunk's points k0 .. k0 + kn; the
// root element's factor is 1 and is left out.
__device__ void weighted_products(const LongPath& path, const int* element_ints, const double* element_zero,
                                  const unsigned* ones, const double* rule, int k0, int kn, double* weighted) {
  for (int k = 0; k < kn; ++k) weighted[k] = rule[2 * (k0 + k) + 1];
  for (int j = 0; j < path.len; ++j) {
    if (element_ints[(long)(path.first + j) * LONG_ELEMENT_INTS] < 0) continue;
    const double z = element_zero[path.first + j];
    const double d = one_bit(ones, j) - z;
    for (int k = 0; k < kn; ++k) weighted[k] *= z + rule[2 * (k0 + k)] * d;
  }
}

// Adds the chunk's SHAP values of the path's elements to `acc` (the row's group).
__device__ void add_quadrature_shap(const LongPath& path, const int* element_ints, const double* element_zero,
                                    const unsigned* ones, const double* rule, int k0, int kn, const double* weighted,
                                    double* acc) {
  for (int i = 0; i < path.len; ++i) {
    const int feature = element_ints[(long)(path.first + i) * LONG_ELEMENT_INTS];
    const double z = element_zero[path.first + i];
    const double d = one_bit(ones, i) - z;
    if (feature < 0 || d == 0.0) continue;
    double sum = 0.0;
    for (int k = 0; k < kn; ++k) sum += weighted[k] / (z + rule[2 * (k0 + k)] * d);
    const double phi = sum * d * path.value;
    if (phi != 0.0) atomicAdd(acc + feature, phi);
  }
}

// Adds the chunk's interaction pairs of the path's elements to `acc` (the row's group): each
// unordered pair once, into both of its entries.
__device__ void add_quadrature_pairs(const LongPath& path, const int* element_ints, const double* element_zero,
                                     const unsigned* ones, const double* rule, int k0, int kn, const double* weighted,
                                     int w1, double* acc) {
  for (int i = 0; i < path.len; ++i) {
    const int fi = element_ints[(long)(path.first + i) * LONG_ELEMENT_INTS];
    const double zi = element_zero[path.first + i];
    const double di = one_bit(ones, i) - zi;
    if (fi < 0 || di == 0.0) continue;
    // The products without i's factor, shared by every partner c.
    double without_i[QUADRATURE_CHUNK];
    for (int k = 0; k < kn; ++k) without_i[k] = weighted[k] / (zi + rule[2 * (k0 + k)] * di);
    for (int c = i + 1; c < path.len; ++c) {
      const int fc = element_ints[(long)(path.first + c) * LONG_ELEMENT_INTS];
      const double zc = element_zero[path.first + c];
      const double dc = one_bit(ones, c) - zc;
      if (fc < 0 || dc == 0.0) continue;
      double sum = 0.0;
      for (int k = 0; k < kn; ++k) sum += without_i[k] / (zc + rule[2 * (k0 + k)] * dc);
      const double v = 0.5 * sum * di * dc * path.value;
      if (v != 0.0) {
        atomicAdd(acc + fc * w1 + fi, v);
        atomicAdd(acc + fi * w1 + fc, v);
      }
    }
  }
}

// The quadrature kernels' work: each thread takes (row, path) pairs of the block, a chunk of
// quadrature points at a time, and adds SHAP values (PAIRS false) or interaction pairs.
template <bool PAIRS>
__device__ void quadrature_paths(const int* path_ints, const double* path_values, const int* element_ints,
                                 const double* element_zero, const double* quadrature, int paths,
                                 const double* thresholds, const unsigned* split_ints, const unsigned* categories,
                                 const double* x, long rows, int cols, int groups, int rows_per_block, int use_shared,
                                 double* out) {
  extern __shared__ double acc_shared[];
  const int w1 = cols + 1;
  const int group_width = PAIRS ? w1 * w1 : w1;
  const int width = groups * group_width;
  BlockWork work;
  if (!begin_block(work, acc_shared, out, width, rows, rows_per_block, paths, use_shared)) return;
  const long slice = work.slice_end - work.slice_begin;
  for (long item = threadIdx.x; item < work.n_rows * slice; item += blockDim.x) {
    const int r = (int)(item / slice);
    const LongPath path = load_long_path(path_ints, path_values, work.slice_begin + (int)(item % slice));
    const double* row = x + (work.first + r) * cols;
    unsigned ones[LONG_PATH_WORDS];
    long_path_ones(path, element_ints, row, thresholds, split_ints, categories, ones);
    const double* rule = quadrature + (long)path.points * (path.points - 1);
    double* acc = work.acc + (long)r * width + (long)path.group * group_width;
    for (int k0 = 0; k0 < path.points; k0 += QUADRATURE_CHUNK) {
      const int kn = min(QUADRATURE_CHUNK, path.points - k0);
      double weighted[QUADRATURE_CHUNK];
      weighted_products(path, element_ints, element_zero, ones, rule, k0, kn, weighted);
      if (PAIRS) add_quadrature_pairs(path, element_ints, element_zero, ones, rule, k0, kn, weighted, w1, acc);
      else add_quadrature_shap(path, element_ints, element_zero, ones, rule, k0, kn, weighted, acc);
    }
  }
  end_block(work, acc_shared, out, width, use_shared);
}

extern "C" __global__ void quadrature_shap_kernel(const int* path_ints, const double* path_values, const int* element_ints,
                                                  const double* element_zero, const double* quadrature, int paths,
                                                  const double* thresholds, const unsigned* split_ints,
                                                  const unsigned* categories, const double* x, long rows, int cols,
                                                  int groups, int rows_per_block, int use_shared, double* out) {
  quadrature_paths<false>(path_ints, path_values, element_ints, element_zero, quadrature, paths, thresholds, split_ints,
                          categories, x, rows, cols, groups, rows_per_block, use_shared, out);
}

extern "C" __global__ void quadrature_interactions_kernel(const int* path_ints, const double* path_values,
                                                          const int* element_ints, const double* element_zero,
                                                          const double* quadrature, int paths, const double* thresholds,
                                                          const unsigned* split_ints, const unsigned* categories,
                                                          const double* x, long rows, int cols, int groups,
                                                          int rows_per_block, int use_shared, double* out) {
  quadrature_paths<true>(path_ints, path_values, element_ints, element_zero, quadrature, paths, thresholds, split_ints,
                         categories, x, rows, cols, groups, rows_per_block, use_shared, out);
}

// ---------------------------------------------------------------------------------------------
// Row kernels: the paths of at most 32 elements, one thread per row.
//
// With f_jk = z_j + t_k (o_j - z_j) and P_k = w_k prod_j f_jk over the path's elements, element
// i's value is v sum_k P_k h_ik and a pair's half share v/2 sum_k P_k h_ik h_ck, where
// h_ik = (o_i - z_i) / f_ik is -1 / (1 - t_k) (the tails) for an element the row does not
// follow and (1 - z_i) / (z_i + t_k (1 - z_i)) (the element's scales) for one it follows. So a
// path costs 2 n m products for P and n m more per output, no division and no shuffle.
// P and the scales are register arrays of the rule size M, a template argument, so every index
// into them is a constant after unrolling; the path's rule size picks the instance (uniform
// across the warp: all its threads are on the same path).

// Adds v at p: plain when the thread owns p (its row's column of the block's accumulator, or its
// row of `out` when no other block adds to it), else atomically.
__device__ __forceinline__ void add_to(double* p, double v, bool atomic) {
  if (atomic) atomicAdd(p, v);
  else *p += v;
}

// P_k for this thread's row (feature f at row[f * stride]) at the rule's M nodes `t` (weights
// `w`); returns which elements the row follows, bit j for element j.
template <int M>
__device__ __forceinline__ unsigned row_path_products(const LongPath& path, const int* element_ints, const double* element_zero,
                                                      const double* t, const double* w, const double* row, int row_stride,
                                                      const double* thresholds, const unsigned* split_ints,
                                                      const unsigned* categories, double* p) {
#pragma unroll
  for (int k = 0; k < M; ++k) p[k] = w[k];
  unsigned ones = 0u;
  for (int j = 0; j < path.len; ++j) {
    const int* e = element_ints + (long)(path.first + j) * LONG_ELEMENT_INTS;
    if (e[0] < 0) continue;  // the root element: factor 1
    const bool follows_j = follows_element(e[0], e[1], e[2], row, row_stride, thresholds, split_ints, categories);
    ones |= (follows_j ? 1u : 0u) << j;
    const double z = element_zero[path.first + j];
    const double d = (follows_j ? 1.0 : 0.0) - z;
#pragma unroll
    for (int k = 0; k < M; ++k) p[k] *= fma(t[k], d, z);
  }
  return ones;
}

// h_ik of an element at the M points: its scales when the row follows it, else -1 / (1 - t_k).
template <int M>
__device__ __forceinline__ void row_scales(bool follows_e, const double* scales, const double* minus_tails, double* h) {
#pragma unroll
  for (int k = 0; k < M; ++k) h[k] = follows_e ? scales[k] : minus_tails[k];
}

// One path's values for one row (feature f at row[f * row_stride]), added to `acc` (the row's
// group; `stride` between its values).
template <int M, bool PAIRS>
__device__ void row_path(const LongPath& path, const int* element_ints, const double* element_zero, const double* quadrature,
                         const double* tails, const double* element_scales, const double* row, int row_stride,
                         const double* thresholds,
                         const unsigned* split_ints, const unsigned* categories, int w1, double* acc, int stride,
                         bool atomic) {
  // The rule in registers before any store: the compiler cannot keep loads across the adds to
  // `acc`, which might alias them.
  const long rule_pair = (long)M * (M - 1) / 2;
  double t[M], w[M], minus_tails[M];
#pragma unroll
  for (int k = 0; k < M; ++k) {
    t[k] = quadrature[2 * (rule_pair + k)];
    w[k] = quadrature[2 * (rule_pair + k) + 1];
    minus_tails[k] = -tails[rule_pair + k];
  }
  double p[M];
  const unsigned ones =
      row_path_products<M>(path, element_ints, element_zero, t, w, row, row_stride, thresholds, split_ints, categories, p);
  for (int i = 0; i < path.len; ++i) {
    const int* ei = element_ints + (long)(path.first + i) * LONG_ELEMENT_INTS;
    if (ei[0] < 0) continue;
    double h[M];
    row_scales<M>(((ones >> i) & 1u) != 0u, element_scales + ei[3], minus_tails, h);
    if (!PAIRS) {
      double sum = 0.0;
#pragma unroll
      for (int k = 0; k < M; ++k) sum = fma(p[k], h[k], sum);
      const double phi = sum * path.value;
      if (phi != 0.0) add_to(acc + (long)ei[0] * stride, phi, atomic);
    } else {
      double q[M];
#pragma unroll
      for (int k = 0; k < M; ++k) q[k] = p[k] * h[k];
      for (int c = i + 1; c < path.len; ++c) {
        const int* ec = element_ints + (long)(path.first + c) * LONG_ELEMENT_INTS;
        if (ec[0] < 0) continue;
        double hc[M];
        row_scales<M>(((ones >> c) & 1u) != 0u, element_scales + ec[3], minus_tails, hc);
        double sum = 0.0;
#pragma unroll
        for (int k = 0; k < M; ++k) sum = fma(q[k], hc[k], sum);
        const double v = 0.5 * sum * path.value;
        if (v != 0.0) {
          add_to(acc + ((long)ec[0] * w1 + ei[0]) * stride, v, atomic);
          add_to(acc + ((long)ei[0] * w1 + ec[0]) * stride, v, atomic);
        }
      }
    }
  }
}

#ifndef ROW_SHAP_MIN_BLOCKS
#define ROW_SHAP_MIN_BLOCKS 4
#endif
#ifndef ROW_PAIRS_MIN_BLOCKS
#define ROW_PAIRS_MIN_BLOCKS 3
#endif

template <bool PAIRS>
__device__ void row_paths(const int* path_ints, const double* path_values, const int* element_ints, const double* element_zero,
                          const double* quadrature, const double* tails, const double* element_scales, int paths,
                          const double* thresholds, const unsigned* split_ints, const unsigned* categories, const double* x,
                          long rows, int cols, int groups, int rows_per_block, int use_shared, double* out) {
  extern __shared__ double acc_shared[];
  const int w1 = cols + 1;
  const int group_width = PAIRS ? w1 * w1 : w1;
  const int width = groups * group_width;
  const long first = (long)blockIdx.x * rows_per_block;
  const int n_rows = (int)min((long)rows_per_block, rows - first);
  if (n_rows <= 0) return;
  // Where the block's sums gather, [width][rows_per_block] (a thread's row is a column):
  // shared memory (use_shared 1 and 2), or for an output too wide for it (3) the block's own
  // region of global memory after the output, so that a warp's adds touch 256 consecutive bytes
  // rather than 32 lines a row's width apart; with 0, each thread adds to its row of `out`.
  const bool gather = use_shared != 0;
  const long block_values = (long)rows_per_block * width;
  double* acc_block =
      use_shared == 3 ? out + rows * width + ((long)blockIdx.y * gridDim.x + blockIdx.x) * block_values : acc_shared;
  // use_shared 2: the block's rows are staged after the accumulator, laid out [feature][row].
  // A thread reads its own row's features; from `x` (row-major) the 32 threads of a warp would
  // read 32 addresses `cols` values apart, one L1 wavefront per cache line they span (16 for 8
  // features, 32 from 16 on), at every element of every path; from the staged rows they read
  // consecutive words.
  const bool stage = use_shared == 2;
  double* staged = stage ? acc_shared + block_values : nullptr;
  if (gather) {
    for (long i = threadIdx.x; i < block_values; i += blockDim.x) acc_block[i] = 0.0;
    if (stage)
      for (int i = threadIdx.x; i < n_rows * cols; i += blockDim.x) {
        const int rr = i % n_rows, f = i / n_rows;
        staged[(long)f * rows_per_block + rr] = x[(first + rr) * cols + f];
      }
    __syncthreads();
  }
  const int slice = (paths + gridDim.y - 1) / gridDim.y;
  const int slice_begin = min(paths, (int)blockIdx.y * slice);
  const int slice_end = min(paths, (int)(blockIdx.y + 1) * slice);
  const int r = threadIdx.x;
  if (r < n_rows) {
    const double* row = stage ? staged + r : x + (first + r) * cols;
    const int row_stride = stage ? rows_per_block : 1;
    // A thread's row: a column of the block's accumulator, or its row of `out`, which other
    // blocks add to only when the paths are split across blocks.
    double* base = gather ? acc_block + r : out + (first + r) * width;
    const int stride = gather ? rows_per_block : 1;
    const bool atomic = !gather && gridDim.y > 1;
    for (int pi = slice_begin; pi < slice_end; ++pi) {
      const LongPath path = load_long_path(path_ints, path_values, pi);
      double* acc = base + (long)path.group * group_width * stride;
#define ROW_PATH_CASE(M)                                                                                                  \
  case M:                                                                                                                 \
    row_path<M, PAIRS>(path, element_ints, element_zero, quadrature, tails, element_scales, row, row_stride, thresholds,  \
                       split_ints, categories, w1, acc, stride, atomic);                                                  \
    break;
      switch (path.points) {
        ROW_PATH_CASE(1)
        ROW_PATH_CASE(2)
        ROW_PATH_CASE(3)
        ROW_PATH_CASE(4)
        ROW_PATH_CASE(5)
        ROW_PATH_CASE(6)
        ROW_PATH_CASE(7)
        ROW_PATH_CASE(8)
        ROW_PATH_CASE(9)
        ROW_PATH_CASE(10)
        ROW_PATH_CASE(11)
        ROW_PATH_CASE(12)
        ROW_PATH_CASE(13)
        ROW_PATH_CASE(14)
        ROW_PATH_CASE(15)
        ROW_PATH_CASE(16)
        default:
          break;  // the host gives these kernels paths of at most 32 elements (16 points)
      }
#undef ROW_PATH_CASE
    }
  }
  if (gather) {
    __syncthreads();
    // Row-major over `out`, so consecutive threads write consecutive addresses.
    for (long i = threadIdx.x; i < (long)n_rows * width; i += blockDim.x) {
      const int rr = (int)(i / width), c = (int)(i % width);
      const double v = acc_block[(long)c * rows_per_block + rr];
      if (v != 0.0) add_to(out + (first + rr) * width + c, v, gridDim.y > 1);
    }
  }
}

// Register caps: the rule-size instances up to M = 8 (paths of up to 17 elements: trees of
// depth 16) fit them; the larger ones, which only paths of 18 to 32 distinct features take,
// spill to local memory rather than halve every launch's occupancy.
extern "C" __global__ void __launch_bounds__(256, ROW_SHAP_MIN_BLOCKS) row_shap_kernel(const int* path_ints, const double* path_values, const int* element_ints,
                                           const double* element_zero, const double* quadrature, const double* tails,
                                           const double* element_scales, int paths, const double* thresholds,
                                           const unsigned* split_ints, const unsigned* categories, const double* x,
                                           long rows, int cols, int groups, int rows_per_block, int use_shared,
                                           double* out) {
  row_paths<false>(path_ints, path_values, element_ints, element_zero, quadrature, tails, element_scales, paths, thresholds,
                   split_ints, categories, x, rows, cols, groups, rows_per_block, use_shared, out);
}

extern "C" __global__ void __launch_bounds__(256, ROW_PAIRS_MIN_BLOCKS) row_interactions_kernel(const int* path_ints, const double* path_values, const int* element_ints,
                                                   const double* element_zero, const double* quadrature, const double* tails,
                                                   const double* element_scales, int paths, const double* thresholds,
                                                   const unsigned* split_ints, const unsigned* categories, const double* x,
                                                   long rows, int cols, int groups, int rows_per_block, int use_shared,
                                                   double* out) {
  row_paths<true>(path_ints, path_values, element_ints, element_zero, quadrature, tails, element_scales, paths, thresholds,
                  split_ints, categories, x, rows, cols, groups, rows_per_block, use_shared, out);
}
