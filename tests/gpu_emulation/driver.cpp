// Runs one launch of a kernel of kernels/treeshap.cu, unchanged, under the CPU emulation of
// CUDA in cuda_emulator.hpp. tests/gpu_emulation.rs writes the launch (the engine's arrays and
// launch plan) to a file and reads the output back:
//
//   driver INPUT OUTPUT
//
// INPUT, little-endian: 16 i64 (kernel: 0 shap, 1 interactions, 2 quadrature shap, 3 quadrature
// interactions, 4 row shap, 5 row interactions; grid x, grid y; block threads; shared bytes;
// rows per block; use shared; units (bins, long paths or the row kernels' paths); rows; cols;
// groups; schedule: 0 round robin, 1 random warps; seed; values of the output buffer; values of
// the output, the rest of the buffer being the blocks' regions (use shared 3); 1 unused), then
// fourteen arrays, each a u64 count and the values: lane_ints (i32), lane_reals (f64), bin_len
// (i32), thresholds (f64), split_ints (u32), categories (u32), x (f64), then the quadrature
// kernel's paths (the long paths, or the row kernels'): path_ints (i32), path_values (f64),
// element_ints (i32), element_zero (f64), quadrature (f64), tails (f64), element_scales (f64).
// OUTPUT: the output buffer's values (f64). Exit status 3: the emulator refused the
// launch (the reason on stderr); 2: bad input.
#include <algorithm>
#include <limits>

#include "cuda_emulator.hpp"

#include "../../kernels/treeshap.cu"

double acc_shared[emu::SHARED_LIMIT_BYTES / 8 + emu::CANARY_DOUBLES];

namespace {

[[noreturn]] void bad_input(const char* what) {
  std::fprintf(stderr, "cuda emulator driver: %s\n", what);
  std::exit(2);
}

template <class T>
std::vector<T> read_array(FILE* in) {
  uint64_t n = 0;
  if (std::fread(&n, 8, 1, in) != 1) bad_input("truncated input (array length)");
  if (n > (uint64_t(1) << 32)) bad_input("array too long");
  std::vector<T> v(n == 0 ? 1 : n);  // kernels index arrays that may be empty but never read them
  if (n > 0 && std::fread(v.data(), sizeof(T), n, in) != n) bad_input("truncated input (array values)");
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) bad_input("usage: driver INPUT OUTPUT");
  FILE* in = std::fopen(argv[1], "rb");
  if (!in) bad_input("cannot open the input");
  int64_t h[16];
  if (std::fread(h, 8, 16, in) != 16) bad_input("truncated input (header)");
  const auto lane_ints = read_array<int>(in);
  const auto lane_reals = read_array<double>(in);
  const auto bin_len = read_array<int>(in);
  const auto thresholds = read_array<double>(in);
  const auto split_ints = read_array<unsigned>(in);
  const auto categories = read_array<unsigned>(in);
  const auto x = read_array<double>(in);
  const auto path_ints = read_array<int>(in);
  const auto path_values = read_array<double>(in);
  const auto element_ints = read_array<int>(in);
  const auto element_zero = read_array<double>(in);
  const auto quadrature = read_array<double>(in);
  const auto tails = read_array<double>(in);
  const auto element_scales = read_array<double>(in);
  std::fclose(in);

  const int kernel = int(h[0]);
  emu::LaunchConfig config;
  config.grid = emu::Dim3{unsigned(h[1]), unsigned(h[2]), 1};
  config.block = emu::Dim3{unsigned(h[3]), 1, 1};
  config.shared_bytes = size_t(h[4]);
  const int rows_per_block = int(h[5]), use_shared = int(h[6]), units = int(h[7]);
  const long rows = long(h[8]);
  const int cols = int(h[9]), groups = int(h[10]);
  config.schedule = h[11] == 1 ? emu::Schedule::RandomWarps : emu::Schedule::RoundRobin;
  config.seed = uint64_t(h[12]);
  // The output zeroed, as the engine clears it; after it (h[14] values on) the region some
  // launches' blocks gather in, which the engine leaves as the last batch did and each block
  // clears: NaN here, so a block that does not shows.
  std::vector<double> out(size_t(h[13]) + 1, 0.0);
  if (h[14] < 0 || h[14] > h[13]) bad_input("the output is larger than its buffer");
  std::fill(out.begin() + h[14], out.begin() + h[13], std::numeric_limits<double>::quiet_NaN());

  if (kernel < 0 || kernel > 5) bad_input("unknown kernel");
  emu::launch(config, acc_shared, [&] {
    switch (kernel) {
      case 0:
        shap_kernel(lane_ints.data(), lane_reals.data(), bin_len.data(), units, thresholds.data(), split_ints.data(),
                    categories.data(), x.data(), rows, cols, groups, rows_per_block, use_shared, out.data());
        break;
      case 1:
        interactions_kernel(lane_ints.data(), lane_reals.data(), bin_len.data(), units, thresholds.data(),
                            split_ints.data(), categories.data(), x.data(), rows, cols, groups, rows_per_block,
                            use_shared, out.data());
        break;
      case 2:
        quadrature_shap_kernel(path_ints.data(), path_values.data(), element_ints.data(), element_zero.data(),
                               quadrature.data(), units, thresholds.data(), split_ints.data(), categories.data(),
                               x.data(), rows, cols, groups, rows_per_block, use_shared, out.data());
        break;
      case 4:
        row_shap_kernel(path_ints.data(), path_values.data(), element_ints.data(), element_zero.data(), quadrature.data(),
                        tails.data(), element_scales.data(), units, thresholds.data(), split_ints.data(),
                        categories.data(), x.data(), rows, cols, groups, rows_per_block, use_shared, out.data());
        break;
      case 5:
        row_interactions_kernel(path_ints.data(), path_values.data(), element_ints.data(), element_zero.data(),
                                quadrature.data(), tails.data(), element_scales.data(), units, thresholds.data(),
                                split_ints.data(), categories.data(), x.data(), rows, cols, groups, rows_per_block,
                                use_shared, out.data());
        break;
      default:
        quadrature_interactions_kernel(path_ints.data(), path_values.data(), element_ints.data(), element_zero.data(),
                                       quadrature.data(), units, thresholds.data(), split_ints.data(),
                                       categories.data(), x.data(), rows, cols, groups, rows_per_block, use_shared,
                                       out.data());
    }
  });

  FILE* o = std::fopen(argv[2], "wb");
  if (!o || std::fwrite(out.data(), 8, size_t(h[13]), o) != size_t(h[13])) bad_input("cannot write the output");
  std::fclose(o);
  return 0;
}
